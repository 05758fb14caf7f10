"""A short chaos run in the default suite: a real 3 controller + 3 broker cluster (separate
processes), real clients, kill -9 / SIGSTOP (and clock skew when libfaketime is installed) on a
seeded schedule. It must find nothing, and must have done real work while faults were on."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from chaos.cluster import FAKETIME_LIB

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_chaos(out: str, *args: str, timeout: float = 170) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "krafty", "chaos", "run", "--out", out, *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_chaos_smoke_finds_nothing(tmp_path):
    kinds = "kill,pause,clock" if os.path.exists(FAKETIME_LIB) else "kill,pause"
    out = str(tmp_path / "run")
    r = run_chaos(out, "--cluster", "local", "--nemesis", kinds, "--time", "25", "--seed", "7",
                  "--rate", "60", "--no-churn", "--hold", "3:5", "--gap", "1:2",
                  "--override", "krafty.log.writer.threads=2")  # appends written in writer threads
    with open(os.path.join(out, "cluster", "broker-4.properties")) as f:
        assert "krafty.log.writer.threads=2" in f.read().splitlines()
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr[-4000:]}"
    assert "acked" in r.stderr, "progress is shown while it runs"
    with open(os.path.join(out, "verdict.json")) as f:
        v = json.load(f)
    assert v["valid"] and not v.get("harness-error"), v["anomaly-types"]
    c = v["counts"]
    assert c["faults"] >= 2, "the nemesis did something"
    assert c["send-ok"] > 1000 and c["lost"] == 0 and c["unseen"] == 0
    assert c["polled"] > 0 and c["final-read"] >= c["send-ok"]
    assert os.path.getsize(os.path.join(out, "history.jsonl")) > 0
    with open(os.path.join(out, "report.html")) as f:
        html = f.read()
    assert html.count("<svg") == 3 and "VALID" in html

    # the same real history with one acknowledged write taken out of every read: found as lost
    from chaos.checker import check
    from chaos.history import load
    history = load(os.path.join(out, "history.jsonl"))
    # the batch metadata the duplicate check places copies with: every partition, every record read
    batches = {op["tp"]: op for op in history if op["f"] == "final-batches"}
    reads = {op["tp"]: op for op in history if op["f"] == "final-read"}
    assert set(batches) == set(reads) and all(op["complete"] for op in batches.values())
    for tp, op in reads.items():
        assert sum(b[1] - b[0] + 1 for b in batches[tp]["batches"]) >= len(op["msgs"]) > 0
        assert all(b[2] >= 0 and b[4] >= 0 for b in batches[tp]["batches"])  # idempotent producers' batches
    gone = next(op for op in history if op["f"] == "send" and op["type"] == "ok")
    for op in history:
        if op["f"] == "poll":
            op["msgs"] = [m for m in op["msgs"] if m[2] != gone["value"]]
        elif op["f"] == "final-read":
            op["msgs"] = [m for m in op["msgs"] if m[1] != gone["value"]]
    v = check(history)
    assert v["anomaly-types"] == ["lost"] and v["anomalies"]["lost"][0]["value"] == gone["value"]


def test_bad_arguments_get_a_clear_error(tmp_path):
    r = run_chaos(str(tmp_path / "x"), "--nemesis", "kill,meteor", "--time", "5", timeout=60)
    assert r.returncode == 2 and "unknown nemesis 'meteor'" in r.stderr
    r = run_chaos(str(tmp_path / "x"), "--cluster", "moon", timeout=60)
    assert r.returncode == 2 and "--cluster" in r.stderr
    r = run_chaos(str(tmp_path / "x"), "--hold", "9:3", timeout=60)
    assert r.returncode == 2 and "--hold: expected 0 <= MIN <= MAX, got '9:3'" in r.stderr
    r = run_chaos(str(tmp_path / "x"), "--override", "krafty.log.writer.threads", timeout=60)
    assert r.returncode == 2 and "--override: expected KEY=VALUE, got 'krafty.log.writer.threads'" in r.stderr


def test_compose_mode_without_a_docker_engine_is_a_clear_error(tmp_path):
    env = dict(os.environ, DOCKER_HOST="unix:///nonexistent/docker.sock")
    r = subprocess.run([sys.executable, "-m", "krafty", "chaos", "run", "--cluster", "compose", "--time", "5",
                        "--out", str(tmp_path / "c")], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2
    assert "cannot start the compose cluster: compose mode: " in r.stderr
    assert ("the docker daemon does not answer" in r.stderr or "docker is not installed" in r.stderr), r.stderr
