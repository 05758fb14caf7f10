"""The core modules stay sans-IO: no clocks, sockets, event loop, OS or global randomness."""

from __future__ import annotations

import ast
import pathlib

import pytest

FORBIDDEN = {"asyncio", "socket", "time", "random", "os", "threading", "grpc", "aiosqlite", "sqlite3"}
CORE = ["raft/core.py", "raft/quorum.py", "raft/messages.py", "raft/api.py"]
ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("path", CORE)
def test_core_module_imports_no_io(path):
    tree = ast.parse((ROOT / path).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert not imported & FORBIDDEN, f"{path} imports {imported & FORBIDDEN}"


def test_a_restarted_single_voter_leads_at_its_first_poll():
    # a single-controller node restarted after leading (kill -9 or a clean stop) must not wait an
    # election timeout: nobody else can vote; that wait was 1-2 s of every restart
    import random

    from raft.core import QuorumState, RaftCore, Role

    core = RaftCore(1, [1], random.Random(0), state=QuorumState(epoch=3, voted_for=1, leader_id=1), now_ms=1000)
    core.poll(1000)
    assert core.role is Role.LEADER and core.epoch == 4
