"""A 2-minute chaos run per nemesis on a real 3 controller + 3 broker cluster (``make
test-cluster``): each must end with a valid verdict, having injected faults and moved leaders."""

from __future__ import annotations

import json
import os

import pytest

from chaos.cluster import FAKETIME_LIB
from tests.chaos.test_chaos_smoke import run_chaos

pytestmark = pytest.mark.cluster


@pytest.mark.parametrize("nemesis", ["kill", "pause", "partition", "clock"])
def test_two_minutes_of_one_nemesis_find_nothing(tmp_path, nemesis):
    cluster = "local"
    if nemesis == "partition":
        if os.geteuid() != 0:
            pytest.skip("network partitions need root (ip netns, iptables)")
        cluster = "netns"
    if nemesis == "clock" and not os.path.exists(FAKETIME_LIB):
        pytest.skip(f"libfaketime is not installed ({FAKETIME_LIB}): make system-deps")
    out = str(tmp_path / nemesis)
    r = run_chaos(out, "--cluster", cluster, "--nemesis", nemesis, "--time", "120", "--seed", "42", timeout=600)
    with open(os.path.join(out, "verdict.json")) as f:
        v = json.load(f)
    assert r.returncode == 0, (f"exit {r.returncode}: {v['anomaly-types']} {v.get('harness-error')}\n"
                               f"{r.stdout}\n{r.stderr[-3000:]}")
    assert v["valid"] and v["counts"]["faults"] >= 5 and v["counts"]["lost"] == 0
    assert v["counts"]["send-ok"] > 5000
    if nemesis in ("kill", "pause"):
        e = v["elections"]
        assert e["controller"]["count"] + e["partition"]["count"] + sum(e["healed_first"].values()) > 0
