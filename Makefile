# krafty — a Kafka-compatible broker cluster in Python.
#   make run    create .venv, install, start a single node on 127.0.0.1:9092 (data in ./data)
#   make test   install what the tests need and run the default suite
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
SEEDS ?= 1000
SIM_SAFETY_S ?= 4
SIM_JOBS ?= $(shell nproc)

.PHONY: run test lint sim bench fuzz system-deps clean chaos test-cluster docker-deps test-docker test-spark pipeline-demo pipeline-bench

$(BIN)/krafty: pyproject.toml setup.py broker/log/_records.pyx broker/log/_legacy.pyx
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	@touch $@

run: $(BIN)/krafty
	$(BIN)/krafty node --config deploy/config/server.properties

# Debian packages the tests use (kcat is a real client in the compatibility suite; faketime skews
# a node's clock, iptables and iproute2 cut the network in the chaos harness).
system-deps:
	@command -v kcat >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq kcat >/dev/null; }
	@dpkg -s faketime iptables iproute2 >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq faketime iptables iproute2 >/dev/null; }
	@command -v docker-compose >/dev/null 2>&1 || docker compose version >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq docker-compose >/dev/null; }

test: $(BIN)/krafty system-deps
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -p no:cacheprovider --ignore=tests/spark --ignore=tests/docker

lint: $(BIN)/krafty
	$(BIN)/ruff check .

sim: $(BIN)/krafty
	$(BIN)/python -m sim.run_world --seeds $(SEEDS) --safety-s $(SIM_SAFETY_S) --jobs $(SIM_JOBS)
	$(BIN)/python -m sim.txn_log.run --seeds $(SEEDS) --jobs $(SIM_JOBS)
	$(BIN)/python -m sim.txn.run --seeds $(SEEDS) --jobs $(SIM_JOBS)

# Long chaos runs, one per nemesis (CHAOS_TIME seconds each; netns needs root, else use
# CHAOS_CLUSTER=local, where partitions need root too). Output in chaos-out/<nemesis>-<seed>.
# CHAOS_WORKLOAD=txn adds the transactional workload.
CHAOS_TIME ?= 600
CHAOS_SEED ?= 1
CHAOS_CLUSTER ?= netns
CHAOS_NEMESES ?= kill pause partition clock
CHAOS_WORKLOAD ?= plain
chaos: $(BIN)/krafty system-deps
	@fail=0; for n in $(CHAOS_NEMESES); do \
	  $(BIN)/krafty chaos run --cluster $(CHAOS_CLUSTER) --nemesis $$n --time $(CHAOS_TIME) --seed $(CHAOS_SEED) \
	    --workload $(CHAOS_WORKLOAD) --out chaos-out/$$n-$(CHAOS_SEED) || fail=1; done; exit $$fail

# Every multi-process cluster test (tests/cluster/, kept out of the default suite for its time)
# and the end-to-end suites against real 3 controller + 3 broker clusters: clients, admin,
# rolling restart under load, failover, and a 2-minute chaos run per nemesis. CI runs it.
test-cluster: $(BIN)/krafty system-deps
	$(BIN)/python -m pytest -q -p no:cacheprovider -m 'cluster or not slow' tests/cluster tests/chaos

# The docker-compose deployment (deploy/) on a real Docker engine: deploy/docker-engine.sh starts
# dockerd when none answers; the tests build a base image without pulling (debootstrap + docker
# import), build and start the compose cluster, use it from the host and from the compose network,
# kill brokers. Prints SKIP and succeeds only when no Docker engine can run on this machine.
docker-deps:
	@dpkg -s docker.io docker-compose debootstrap >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq docker.io docker-compose debootstrap >/dev/null; }

test-docker: $(BIN)/krafty system-deps docker-deps
	@rc=0; deploy/docker-engine.sh start || rc=$$?; \
	if [ $$rc = 3 ]; then echo "SKIP: make test-docker: no Docker engine can run on this machine (dockerd logs in build/docker-engine/)"; exit 0; fi; \
	[ $$rc = 0 ] || exit $$rc; \
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/docker || rc=$$?; \
	deploy/docker-engine.sh stop; exit $$rc

# The protocol fuzzer (bench/fuzz): FUZZ_N mutated and hostile inputs from seed FUZZ_SEED against a
# memory-limited node; prints inputs/s, findings, crashes and peak RSS, exits 1 on a crash.
# Findings (with replayable inputs) in fuzz-out/.
FUZZ_N ?= 100000
FUZZ_SEED ?= 1
fuzz: $(BIN)/krafty
	$(BIN)/python -m bench.fuzz run --inputs $(FUZZ_N) --seed $(FUZZ_SEED) --out fuzz-out

bench: $(BIN)/krafty
	$(BIN)/python bench/produce_consume.py
	$(BIN)/python bench/raft_election.py --trials 20
	$(BIN)/python bench/groups.py

# The Spark data source (pipeline/): pyspark and pyarrow come with the [spark] extra; Java 17
# must be on the machine (Debian: openjdk-17-jre-headless).
$(VENV)/.spark: $(BIN)/krafty
	@command -v java >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq openjdk-17-jre-headless >/dev/null; }
	$(BIN)/pip install --quiet -e '.[test,spark]'
	@touch $@

test-spark: $(VENV)/.spark
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/spark

pipeline-demo: $(VENV)/.spark
	$(BIN)/python pipeline/examples/demo.py

pipeline-bench: $(VENV)/.spark
	$(BIN)/python pipeline/examples/bench_read.py

clean:
	rm -rf $(VENV) data build fuzz-out *.egg-info
