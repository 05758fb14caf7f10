"""The replication simulation takes its randomness from one seeded ``random.Random`` (the cores
themselves are checked by tests/unit/test_sans_io.py)."""

from __future__ import annotations

import ast
import glob
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
FORBIDDEN = {"asyncio", "socket", "time", "random", "os", "threading", "selectors"}


def _imports(path: str) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "sim", "replication", "*.py"))),
                         ids=lambda p: os.path.basename(p))
def test_replication_sim_uses_no_real_io_or_clock(path):
    allowed = {"time", "random"} if path.endswith("run.py") else {"random"}
    assert not _imports(path) & (FORBIDDEN - allowed)
