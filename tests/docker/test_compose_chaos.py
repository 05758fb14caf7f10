"""`krafty chaos run --cluster compose` on a real Docker engine (`make test-docker`): the chaos
harness brings up its own compose project from deploy/docker-compose.yml, kills, pauses and
partitions containers (docker kill/start, docker pause, iptables in the containers' network
namespaces) while real clients write and read, and must find nothing; it leaves no container,
volume or network behind. Clock skew is refused with a clear message (no libfaketime in the
image)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.docker.conftest import ROOT, run


def chaos(out: str, image: str, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KRAFTY_", "COMPOSE_"))}
    env["KRAFTY_IMAGE"] = image
    return subprocess.run([sys.executable, "-m", "krafty", "chaos", "run", "--cluster", "compose", "--out", out,
                           *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def _leftovers(project: str) -> list[str]:
    label = f"label=com.docker.compose.project={project}"
    out = []
    for kind in ("container", "volume", "network"):
        cmd = ["docker", kind, "ls", "-q", "--filter", label]
        if kind == "container":
            cmd.insert(3, "-a")
        out += [f"{kind} {x}" for x in run(cmd, check=False).stdout.split()]
    return out


def test_compose_chaos_run_finds_nothing_and_cleans_up(tmp_path, krafty_image):
    out = str(tmp_path / "run")
    r = chaos(out, krafty_image, "--nemesis", "kill,pause,partition", "--time", "40", "--seed", "3",
              "--hold", "3:6", "--gap", "1:3", "--rate", "60")
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr[-4000:]}"
    with open(os.path.join(out, "verdict.json")) as f:
        v = json.load(f)
    assert v["valid"] and not v.get("harness-error") and v["meta"]["cluster"] == "compose"
    c = v["counts"]
    assert c["faults"] >= 3 and c["send-ok"] > 1000 and c["lost"] == 0 and c["unseen"] == 0
    assert c["final-read"] >= c["send-ok"]
    with open(os.path.join(out, "cluster", "docker-compose.chaos.yml")) as f:
        override = json.load(f)
    assert "broker.session.timeout.ms=3000" in override["services"]["broker-4"]["command"]
    for name in ("controller-1", "broker-4"):  # the containers' logs are kept with the run
        assert os.path.getsize(os.path.join(out, "cluster", f"{name}.log")) > 0
    project = next(line.split()[-1] for line in r.stderr.splitlines() if "compose project" in line)
    assert not _leftovers(project)


def test_compose_clock_nemesis_is_refused_clearly(tmp_path, krafty_image):
    r = chaos(str(tmp_path / "clock"), krafty_image, "--nemesis", "clock", "--time", "10", timeout=120)
    assert r.returncode == 2
    assert "clock skew is not supported in compose mode" in r.stderr and "no nemesis left to run" in r.stderr
