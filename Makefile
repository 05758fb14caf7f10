# krafty — a Kafka-compatible broker cluster in Python.
#   make run    create .venv, install, start a single node on 127.0.0.1:9092 (data in ./data)
#   make test   install what the tests need and run the default suite
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
SEEDS ?= 1000

.PHONY: run test lint sim bench system-deps clean test-spark pipeline-demo pipeline-bench

$(BIN)/krafty: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	@touch $@

run: $(BIN)/krafty
	$(BIN)/krafty node --config deploy/config/server.properties

# Debian packages the tests use (kcat is a real client in the compatibility suite).
system-deps:
	@command -v kcat >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq kcat >/dev/null; }

test: $(BIN)/krafty system-deps
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -p no:cacheprovider --ignore=tests/spark

lint: $(BIN)/krafty
	$(BIN)/ruff check .

sim: $(BIN)/krafty
	$(BIN)/python -m sim.run --seeds $(SEEDS)
	$(BIN)/python -m sim.replication.run --seeds $(SEEDS)
	$(BIN)/python -m sim.controller.run --seeds $(SEEDS)

bench: $(BIN)/krafty
	$(BIN)/python bench/produce_consume.py
	$(BIN)/python bench/raft_election.py --trials 20

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
	rm -rf $(VENV) data build *.egg-info
