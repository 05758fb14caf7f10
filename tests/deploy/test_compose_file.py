"""deploy/docker-compose.yml, checked without a Docker engine: the compose implementation
validates it (`config -q`), and the resolved file is read back to check the deployment's
promises: 3 controllers + 3 brokers on 3 racks, named volumes, health checks, restart
policies, and advertised listeners that every client can reach (INTERNAL by service name
inside the network, EXTERNAL by the published host port). Each node's effective
configuration is parsed with krafty's own Config, as the node would at startup."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from common.config import Config, parse_properties

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "deploy" / "docker-compose.yml"
CONFIG_DIR = ROOT / "deploy" / "config"


def compose_command() -> list[str]:
    """`docker compose` (v2 plugin) when present, else Debian's `docker-compose` (v1)."""
    if shutil.which("docker"):
        p = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
        if p.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.fail("no compose implementation: install Debian's docker-compose (make system-deps)", pytrace=False)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KRAFTY_", "BASE_IMAGE", "BUILD_IMAGE", "COMPOSE_"))}
    env.update(extra)
    return env


def _compose(*args: str, file: Path = COMPOSE_FILE, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([*compose_command(), "-f", str(file), "--project-directory", str(file.parent), *args],
                          capture_output=True, text=True, timeout=120, env=_env(**env))


def test_compose_config_validates():
    r = _compose("config", "-q")
    assert r.returncode == 0, r.stderr


def test_compose_config_rejects_a_broken_file(tmp_path):
    broken = tmp_path / "docker-compose.yml"
    # an option no compose version knows, merged into every service through the x-krafty anchor
    broken.write_text(COMPOSE_FILE.read_text().replace("  restart: unless-stopped\n",
                                                       "  restart: unless-stopped\n  colour: blue\n", 1))
    assert "colour: blue" in broken.read_text()
    r = _compose("config", "-q", file=broken)
    assert r.returncode != 0
    assert "colour" in r.stderr


def _resolved(**env: str) -> dict:
    r = _compose("config", **env)
    assert r.returncode == 0, r.stderr
    return yaml.safe_load(r.stdout)


def _node_config(service: dict) -> Config:
    """The Config a service's node starts with: its properties file plus its --override flags."""
    cmd = service["command"]
    cmd = shlex.split(cmd) if isinstance(cmd, str) else list(cmd)
    assert cmd[:2] == ["node", "--config"], cmd
    path = cmd[2]
    assert path.startswith("/etc/krafty/"), path  # the Dockerfile copies deploy/config/ there
    values = {k: v for k, v, _ in parse_properties((CONFIG_DIR / path.removeprefix("/etc/krafty/")).read_text())}
    rest = cmd[3:]
    while rest:
        assert rest[0] == "--override" and len(rest) >= 2, rest
        k, _, v = rest[1].partition("=")
        values[k] = v
        rest = rest[2:]
    cfg = Config(values, warn_unknown=False)
    assert not cfg.unknown, f"unknown keys {cfg.unknown}"
    return cfg


def _published(service: dict) -> dict[int, int]:
    """container port -> host port."""
    out = {}
    for p in service.get("ports", []):
        if isinstance(p, str):
            host, _, target = p.rpartition(":")
            out[int(target)] = int(host.rpartition(":")[2])
        else:
            out[int(p["target"])] = int(p["published"])
    return out


@pytest.mark.parametrize("env", [{}, {"KRAFTY_PORT_4": "29092", "KRAFTY_PORT_5": "29093", "KRAFTY_PORT_6": "29094",
                                      "KRAFTY_EXTERNAL_HOST": "kafka.example.test"}], ids=["defaults", "env"])
def test_every_advertised_listener_is_reachable_by_its_clients(env):
    doc = _resolved(**env)
    services = doc["services"]
    nodes = {name: _node_config(s) for name, s in services.items() if name != "prometheus"}
    controllers = {n: c for n, c in nodes.items() if c["process.roles"] == ["controller"]}
    brokers = {n: c for n, c in nodes.items() if c["process.roles"] == ["broker"]}
    assert len(controllers) == 3 and len(brokers) == 3
    assert len({c["node.id"] for c in nodes.values()}) == 6
    assert sorted(c["broker.rack"] for c in brokers.values()) == ["a", "b", "c"]
    assert len({c["cluster.id"] for c in nodes.values()}) == 1 and next(iter(nodes.values()))["cluster.id"]

    # the quorum: every voter is a controller service, with its node id and its listener port
    assert len({tuple(c["controller.quorum.voters"]) for c in nodes.values()}) == 1
    for vid, host, port in next(iter(nodes.values()))["controller.quorum.voters"]:
        assert host in controllers, f"voter {vid}@{host} is not a controller service"
        assert controllers[host]["node.id"] == vid
        assert port in [lst.port for lst in controllers[host]["listeners"]]

    external_host = env.get("KRAFTY_EXTERNAL_HOST", "localhost")
    host_ports = set()
    for name, cfg in brokers.items():
        bound = {lst.name: lst for lst in cfg["listeners"]}
        adv = {lst.name: lst for lst in cfg["advertised.listeners"]}
        assert set(adv) == {"INTERNAL", "EXTERNAL"} and cfg["inter.broker.listener.name"] == "INTERNAL"
        # inside the network: the service name, on the port the listener binds
        assert adv["INTERNAL"].host == name and adv["INTERNAL"].port == bound["INTERNAL"].port
        assert bound["INTERNAL"].host == "0.0.0.0" and bound["EXTERNAL"].host == "0.0.0.0"
        # outside: the host port that docker publishes for the EXTERNAL listener's container port
        published = _published(services[name])
        assert published.get(bound["EXTERNAL"].port) == adv["EXTERNAL"].port, (name, published)
        assert adv["EXTERNAL"].host == external_host
        host_ports.add(adv["EXTERNAL"].port)
        if env:
            assert adv["EXTERNAL"].port == int(env[f"KRAFTY_PORT_{cfg['node.id']}"])
    assert len(host_ports) == 3


def test_services_have_health_checks_restart_policies_and_named_volumes():
    doc = _resolved()
    named = set(doc.get("volumes") or {})
    for name, s in doc["services"].items():
        if name == "prometheus":
            continue
        cfg = _node_config(s)
        assert s["restart"] in ("unless-stopped", "always"), name
        test = s["healthcheck"]["test"]
        # the node's own /ready: a broker unfenced and accepting clients, a controller in the quorum
        assert test == ["CMD", "krafty", "healthcheck", "ready", f"http://127.0.0.1:{cfg['krafty.metrics.port']}/ready"]
        if cfg["process.roles"] == ["broker"]:
            assert set(s["depends_on"]) == {"controller-1", "controller-2", "controller-3"}
        vols = s["volumes"]
        assert len(vols) == 1
        v = vols[0]
        source, target = (v["source"], v["target"]) if isinstance(v, dict) else v.split(":")[:2]
        assert source in named and target == "/var/lib/krafty", v
        assert cfg["log.dirs"][0].startswith("/var/lib/krafty/")
        assert s["build"]["dockerfile"] == "deploy/Dockerfile" and s["build"]["args"]["BASE_IMAGE"]
        assert s["build"]["args"]["BUILD_IMAGE"]
    assert len(named) == 7  # six nodes and prometheus


def test_prometheus_scrapes_every_node_on_its_metrics_port():
    doc = _resolved()
    services = doc["services"]
    prom = services["prometheus"]
    assert prom["build"]["dockerfile"] == "deploy/prometheus/Dockerfile" and prom["build"]["args"]["BASE_IMAGE"]
    assert _published(prom) == {9090: 9090}
    scrape = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    targets = {t for job in scrape["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    expected = {f"{name}:{_node_config(s)['krafty.metrics.port']}" for name, s in services.items()
                if name != "prometheus"}
    assert targets == expected and len(expected) == 6
    assert set(prom["depends_on"]) == set(services) - {"prometheus"}


def test_dockerfile_takes_the_base_and_build_images_as_build_arguments():
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    assert text.count("ARG BASE_IMAGE=python:3.11-slim") == 1
    assert text.count("ARG BUILD_IMAGE=python:3.11\n") == 1  # with a C compiler: the compiled record walker
    assert [ln for ln in text.splitlines() if ln.startswith("FROM ")] == [
        "FROM ${BUILD_IMAGE} AS build", "FROM ${BASE_IMAGE}"]
    # everything COPY takes must survive .dockerignore
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    for needed in ("pyproject.toml", "setup.py", "README.md", "deploy/config/", "deploy/prometheus/", "krafty/", "broker/",
                   "common/"):
        assert f"!{needed}" in ignore, needed
