"""The cores do no I/O and read no clock or randomness of their own (DESIGN.md: sans-IO cores), so
sim/ runs them in virtual time and a seed replays exactly. This is the one check for every core:
it flags imports of I/O, clock, randomness and concurrency modules, and reads of the clock or of
fresh randomness through other names (``datetime.now()``, ``uuid.uuid4()``, ``open()``).
Shells take these from ``common.clock`` (a Clock) and their injected network and disk instead.

Also: each layer imports only the layers DESIGN.md allows."""

import ast
import glob
import os
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FORBIDDEN_MODULES = {"asyncio", "socket", "time", "random", "os", "threading", "selectors", "subprocess", "signal",
                     "secrets", "multiprocessing", "concurrent", "grpc", "aiosqlite", "sqlite3", "shutil", "tempfile"}
# clock reads and fresh randomness reached through a name that is not itself forbidden
FORBIDDEN_ATTRS = {("datetime", "now"), ("datetime", "utcnow"), ("datetime", "today"), ("date", "today"),
                   ("uuid", "uuid1"), ("uuid", "uuid4")}
FORBIDDEN_NAMES = {"uuid1", "uuid4", "open", "input"}
CORES = [
    "raft/core*.py", "raft/quorum*.py", "raft/messages.py", "raft/api.py",
    "metadata/*.py",
    "controller/topics.py", "controller/placement.py", "controller/cluster.py", "controller/replication.py",
    "controller/acls.py", "controller/scram.py",
    "broker/replica/partition*.py", "broker/replica/follower.py", "broker/replica/selector.py",
    "broker/group/state*.py", "broker/group/shard.py", "broker/group/records.py", "broker/group/lag.py",
    "broker/group/consumer_group.py", "broker/group/consumer_records.py", "broker/group/assignors.py",
    "common/group_config.py", "controller/configs.py",
    "broker/txn/state.py", "broker/txn/records.py",
    "broker/fetch_session.py",
    "common/errors.py", "common/topic_names.py",
]


def core_files() -> list[str]:
    out = []
    for pat in CORES:
        found = glob.glob(os.path.join(ROOT, pat))
        assert found, f"no core module matches {pat}"
        out += found
    return sorted(set(out))


def violations(source: str) -> list[str]:
    """What in ``source`` does I/O or reads a clock or fresh randomness."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            bad += [f"import {a.name}" for a in node.names if a.name.split(".")[0] in FORBIDDEN_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] in FORBIDDEN_MODULES:
                bad.append(f"from {node.module} import ...")
            bad += [f"from {node.module} import {a.name}" for a in node.names
                    if (node.module.split(".")[-1], a.name) in FORBIDDEN_ATTRS]
        elif isinstance(node, ast.Attribute):
            base = node.value
            name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else None
            if (name, node.attr) in FORBIDDEN_ATTRS:
                bad.append(f"{name}.{node.attr}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_NAMES:
            bad.append(f"{node.func.id}()")
    return bad


@pytest.mark.parametrize("path", core_files(), ids=lambda p: os.path.relpath(p, ROOT))
def test_core_module_does_no_io_and_reads_no_clock(path):
    bad = violations(open(path).read())
    assert not bad, f"{os.path.relpath(path, ROOT)}: {bad}"


@pytest.mark.parametrize("snippet", [
    "import time", "import os.path", "from asyncio import sleep", "import random", "from socket import socket",
    "import datetime\nx = datetime.datetime.now()", "from datetime import datetime\nx = datetime.now()",
    "from datetime import date\nx = date.today()", "import uuid\nx = uuid.uuid4()", "from uuid import uuid4",
    "with open('f') as f: pass", "import threading", "import secrets",
])
def test_the_check_flags_each_kind_of_io(snippet):
    assert violations(textwrap.dedent(snippet))


def test_the_check_passes_pure_code():
    assert not violations("import uuid\nimport datetime\nx = uuid.UUID(int=1)\nd = datetime.timedelta(1)\n"
                          "def f(now): return now + 1\n")


PROJECT = {"common", "proto", "raft", "metadata", "controller", "broker", "sim", "chaos", "pipeline", "krafty"}
ALLOWED = {  # DESIGN.md, "Layers"
    "common": {"common"},
    "proto": {"proto"},
    "metadata": {"metadata", "common"},
    "raft": {"raft", "common", "proto"},
    "controller": {"controller", "common", "metadata", "raft", "proto"},
    "broker": {"broker", "common", "metadata", "proto"},
}


def _runtime_imports(tree):
    """Imports outside ``if TYPE_CHECKING:`` blocks."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
        stack.extend(ast.iter_child_nodes(node))


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports_only_what_design_allows(layer):
    bad = []
    for path in glob.glob(os.path.join(ROOT, layer, "**", "*.py"), recursive=True):
        if path.endswith("_pb2.py") or path.endswith("_pb2_grpc.py"):
            continue
        for mod in _runtime_imports(ast.parse(open(path).read())):
            top = mod.split(".")[0]
            if top in PROJECT and top not in ALLOWED[layer]:
                bad.append(f"{os.path.relpath(path, ROOT)} imports {mod}")
    assert not bad, "\n".join(bad)


# --- shells: the clock, fresh randomness and ids come from common/clock.py alone ---------------

SHELL_LAYERS = ["common", "proto", "raft", "metadata", "controller", "broker", "krafty"]
CLOCK_READS = {("time", n) for n in ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter",
                                     "perf_counter_ns", "process_time", "sleep")} | \
              {("random", n) for n in ("random", "randint", "randrange", "choice", "choices", "shuffle", "sample",
                                       "uniform", "getrandbits", "randbytes", "SystemRandom")} | \
              {("uuid", "uuid1"), ("uuid", "uuid4"), ("datetime", "now"), ("datetime", "utcnow"),
               ("datetime", "today"), ("date", "today"), ("os", "urandom")}
# where one of these is right, and why (nothing here runs inside a node)
CLOCK_READERS = {
    "common/clock.py": "the one place: SystemClock reads the machine's clocks and CSPRNG",
    "broker/log/_bench.py": "a benchmark: it times the machine's disk with the machine's clock",
    "raft/cli.py": "a blocking command-line tool: waits between retries with time.sleep",
    "raft/testnode.py": "a test harness driving real processes: polls with time.sleep",
    "krafty/cluster.py": "the local-cluster launcher (a supervisor process): polls its children with time.sleep",
    "krafty/metadata_quorum.py": "a blocking command-line tool: waits between retries with time.sleep",
}


def clock_reads(source: str) -> list[str]:
    """Reads of a clock, waits on the machine's time, fresh randomness and fresh ids that bypass
    ``common.clock`` (``time.time()``, ``uuid.uuid4()``, ``random.random()``, an unseeded
    ``random.Random()``, ``secrets.*``, ``os.urandom``, ``datetime.now()``...)."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module in ("time", "uuid", "random", "secrets", "datetime"):
            bad += [f"from {node.module} import {a.name}" for a in node.names
                    if (node.module, a.name) in CLOCK_READS or node.module == "secrets"]
        elif isinstance(node, ast.Import):
            bad += [f"import {a.name}" for a in node.names if a.name == "secrets"]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            base = node.func.value
            name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else None
            if (name, node.func.attr) in CLOCK_READS or (name == "random" and node.func.attr == "Random"
                                                          and not node.args):
                bad.append(f"{name}.{node.func.attr}()")
    return bad


def shell_files() -> list[str]:
    out = []
    for layer in SHELL_LAYERS:
        for path in glob.glob(os.path.join(ROOT, layer, "**", "*.py"), recursive=True):
            rel = os.path.relpath(path, ROOT)
            if not rel.endswith(("_pb2.py", "_pb2_grpc.py")) and rel not in CLOCK_READERS:
                out.append(rel)
    return sorted(out)


def test_no_module_reads_the_clock_or_randomness_but_common_clock():
    """DESIGN.md: shells take their clock and randomness from one injected place, so the
    simulator runs them in virtual time and a seed replays exactly (waiting goes through the
    event loop, ``asyncio.sleep``/``loop.call_later``, which is the simulator's loop there)."""
    bad = {rel: found for rel in shell_files() if (found := clock_reads(open(os.path.join(ROOT, rel)).read()))}
    assert not bad, bad
    for rel in CLOCK_READERS:
        assert os.path.exists(os.path.join(ROOT, rel)), f"{rel} is gone: drop it from CLOCK_READERS"


@pytest.mark.parametrize("snippet", [
    "import time\nt = time.time()", "import time\nt = time.monotonic()", "from time import monotonic",
    "import uuid\nu = uuid.uuid4()", "import random\nx = random.random()", "import random\nr = random.Random()",
    "import secrets", "import os\nb = os.urandom(8)", "import datetime\nd = datetime.datetime.now()",
    "import time\ntime.sleep(1)",
])
def test_the_shell_check_flags_each_direct_read(snippet):
    assert clock_reads(snippet)


def test_the_shell_check_passes_injected_reads():
    assert not clock_reads("import random\nimport uuid\nfrom common.clock import SYSTEM\nt = SYSTEM.monotonic()\n"
                           "r = random.Random(7)\nu = uuid.UUID(int=1)\n")
