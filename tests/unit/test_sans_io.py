"""The cores must not do I/O (DESIGN.md: sans-IO cores), so sim/ can run them in virtual time."""

import ast
import glob
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FORBIDDEN = {"asyncio", "socket", "time", "random", "os", "threading", "selectors"}
CORES = ["raft/core*.py", "raft/quorum*.py", "controller/topics.py", "controller/placement.py", "controller/cluster.py",
         "controller/replication.py", "broker/replica/follower.py",
         "broker/replica/partition*.py", "broker/group/state*.py", "broker/group/shard.py", "broker/group/lag.py", "broker/group/records.py",
         "broker/txn/state.py", "broker/txn/records.py", "metadata/image.py", "metadata/delta.py",
         "metadata/records.py"]


def _core_files():
    out = []
    for pat in CORES:
        out += glob.glob(os.path.join(ROOT, pat))
    return sorted(set(out))


@pytest.mark.parametrize("path", _core_files(), ids=lambda p: os.path.relpath(p, ROOT))
def test_core_module_does_no_io(path):
    tree = ast.parse(open(path).read())
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bad += [a.name for a in node.names if a.name.split(".")[0] in FORBIDDEN]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in FORBIDDEN:
            bad.append(node.module)
    assert not bad, f"{path} imports {bad}"


def test_there_are_core_modules_to_check():
    assert len(_core_files()) >= 6


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
