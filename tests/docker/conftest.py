"""The docker-compose deployment, for real: a Docker engine must answer (`make test-docker`
starts one with deploy/docker-engine.sh).

Nothing is pulled from a registry. The base image is a Debian bookworm root filesystem made
with debootstrap (python3, python3-venv, kcat for the in-network client, and a C compiler with
Python's headers for the record walker) and turned into an image with `docker import`; it is
passed to deploy/Dockerfile as BASE_IMAGE and BUILD_IMAGE. The image's
Python dependencies come from a wheelhouse built on the host (build/docker-wheelhouse), so
the build needs no network either. The cluster runs under its own compose project name with
free host ports, and `down -v` removes its containers, network and volumes at the end."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from tests.cluster.conftest import wait_until

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "deploy" / "docker-compose.yml"
BASE_TAG = "krafty-test-base:bookworm-cc-prometheus"
IMAGE_TAG = "krafty-test:latest"
PROMETHEUS_TAG = "krafty-test-prometheus:latest"
ROOTFS = ROOT / "build" / "docker-base" / "rootfs"
WHEELHOUSE = ROOT / "build" / "docker-wheelhouse"
# prometheus: Debian's package, for the compose file's prometheus service (deploy/prometheus/Dockerfile);
# gcc and headers: the build stage compiles the record walker
BASE_PACKAGES = "python3,python3-venv,ca-certificates,kcat,prometheus,gcc,libc6-dev,python3-dev"
MIRROR = os.environ.get("KRAFTY_DEBIAN_MIRROR", "http://deb.debian.org/debian")


def run(cmd: list[str], timeout: float = 600, check: bool = True, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


def compose_command() -> list[str]:
    if run(["docker", "compose", "version"], check=False).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    raise AssertionError("no compose implementation (apt-get install docker-compose)")


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def ensure_base_image() -> None:
    if run(["docker", "image", "inspect", BASE_TAG], check=False).returncode == 0:
        return
    if not all((ROOTFS / "usr" / "bin" / b).exists() for b in ("kcat", "prometheus", "gcc")):
        if ROOTFS.exists():
            shutil.rmtree(ROOTFS)
        ROOTFS.parent.mkdir(parents=True, exist_ok=True)
        run(["debootstrap", "--variant=minbase", f"--include={BASE_PACKAGES}", "bookworm", str(ROOTFS), MIRROR],
            timeout=1200)
    tar = subprocess.Popen(["tar", "-C", str(ROOTFS), "-c", "."], stdout=subprocess.PIPE)
    imp = subprocess.run(["docker", "import", "-", BASE_TAG], stdin=tar.stdout, capture_output=True, text=True,
                         timeout=600)
    tar.stdout.close()
    tar.wait()
    assert imp.returncode == 0 and tar.returncode == 0, imp.stderr


def ensure_wheelhouse() -> None:
    """Wheels of krafty's pinned dependencies (and of its build backend) for the image build."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    reqs = [*project["project"]["dependencies"], *project["build-system"]["requires"]]
    WHEELHOUSE.mkdir(parents=True, exist_ok=True)
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(WHEELHOUSE), *reqs], timeout=1200)


class ComposeCluster:
    def __init__(self):
        self.project = f"kraftytest{os.getpid()}"
        ports = _free_ports(4)
        self.ports = {4: ports[0], 5: ports[1], 6: ports[2]}
        self.prometheus_port = ports[3]
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("KRAFTY_", "COMPOSE_"))}
        self.env.update({"KRAFTY_IMAGE": IMAGE_TAG, "BASE_IMAGE": BASE_TAG, "BUILD_IMAGE": BASE_TAG,
                         "KRAFTY_PROMETHEUS_IMAGE": PROMETHEUS_TAG,
                         "KRAFTY_PROMETHEUS_PORT": str(self.prometheus_port),
                         **{f"KRAFTY_PORT_{n}": str(p) for n, p in self.ports.items()}})
        self.compose = [*compose_command(), "-p", self.project, "-f", str(COMPOSE_FILE)]
        self.services = ["controller-1", "controller-2", "controller-3", "broker-4", "broker-5", "broker-6"]

    @property
    def bootstrap(self) -> str:
        return ",".join(f"localhost:{p}" for p in self.ports.values())

    @property
    def network(self) -> str:
        return f"{self.project}_default"

    def run(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
        return run([*self.compose, *args], timeout=timeout, check=check, env=self.env, cwd=ROOT)

    def container(self, service: str) -> str:
        cid = self.run("ps", "-q", service).stdout.strip()
        assert cid, f"no container for {service}"
        return cid

    def inspect(self, service: str, fmt: str) -> str:
        return run(["docker", "inspect", "-f", fmt, self.container(service)]).stdout.strip()

    def health(self, service: str) -> str:
        return self.inspect(service, "{{.State.Status}}/{{if .State.Health}}{{.State.Health.Status}}{{end}}")

    def wait_healthy(self, services=None, timeout: float = 240) -> None:
        services = services or self.services
        wait_until(lambda: all(self.health(s) == "running/healthy" for s in services), timeout,
                   f"{', '.join(services)} healthy "
                   f"(now: {', '.join(f'{s}={self.health(s)}' for s in services)})", interval=2)

    def client(self, *args: str, stdin: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
        """A command in a throw-away container on the compose network (the base image has kcat)."""
        return run(["docker", "run", "--rm", "-i", "--network", self.network, BASE_TAG, *args], input=stdin,
                   timeout=timeout)

    def logs(self) -> str:
        return self.run("logs", "--no-color", "--tail", "30", check=False).stdout


_FAILED: list[str] = []


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    rep = yield
    if rep.failed:
        _FAILED.append(item.nodeid)
    return rep


@pytest.fixture(scope="session")
def krafty_image() -> str:
    """The krafty image (IMAGE_TAG) built from deploy/Dockerfile on the debootstrapped base."""
    if run(["docker", "info"], check=False, timeout=30).returncode != 0:
        pytest.fail("no Docker engine answers: run these tests with `make test-docker`", pytrace=False)
    ensure_base_image()
    ensure_wheelhouse()
    ComposeCluster().run("build", timeout=1800)
    return IMAGE_TAG


@pytest.fixture(scope="session")
def compose_cluster(krafty_image):
    c = ComposeCluster()
    failed = False
    try:
        t0 = time.time()
        c.run("up", "-d", "--no-build")
        c.wait_healthy()
        c.up_seconds = time.time() - t0
        yield c
    except BaseException:
        failed = True
        raise
    finally:
        if failed or _FAILED or os.environ.get("KRAFTY_DOCKER_LOGS"):
            print(c.logs(), file=sys.__stderr__)
        c.run("down", "-v", "--remove-orphans", "-t", "30", check=False)
        left = run(["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={c.project}"],
                   check=False).stdout.split()
        vols = run(["docker", "volume", "ls", "-q", "--filter", f"label=com.docker.compose.project={c.project}"],
                   check=False).stdout.split()
        assert not left and not vols, f"compose down left containers {left} and volumes {vols}"
