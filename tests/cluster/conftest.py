"""A real multi-process krafty cluster on loopback (controllers + brokers), for tests that
kill and restart nodes."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest

from krafty.cluster import free_base_port, node_configs, write_properties

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Every test here starts a multi-process cluster (3+3 nodes, ~10-30 s each): they run in
    `make test-cluster` (CI runs it after `make test`), not in the default suite."""
    for item in items:
        if str(item.path).startswith(HERE + os.sep):
            item.add_marker(pytest.mark.cluster)


class Cluster:
    def __init__(self, directory: str, controllers: int = 3, brokers: int = 3, racks=None, overrides=None):
        self.dir = directory
        self.base = free_base_port()
        self.configs = dict(node_configs(controllers, brokers, self.base, directory, racks, extra=overrides or {}))
        self.procs: dict[str, subprocess.Popen] = {}
        self.n_controllers, self.n_brokers = controllers, brokers
        self.env: dict[str, dict[str, str]] = {}  # node name -> extra environment (e.g. libfaketime)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.base + i}" for i in range(self.n_brokers))

    def broker_name(self, broker_id: int) -> str:
        return f"broker-{broker_id}"

    def start(self, name: str | None = None) -> None:
        for n, props in self.configs.items():
            if name is not None and n != name:
                continue
            path = os.path.join(self.dir, f"{n}.properties")
            write_properties(path, props)
            log = open(os.path.join(self.dir, f"{n}.log"), "ab")
            self.procs[n] = subprocess.Popen([sys.executable, "-m", "krafty", "node", "--config", path], cwd=ROOT,
                                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                             env={**os.environ, **self.env.get(n, {})} if n in self.env else None)

    def kill(self, name: str) -> None:
        p = self.procs.pop(name)
        p.send_signal(signal.SIGKILL)
        p.wait(10)

    def stop(self, name: str, timeout: float = 40) -> None:
        p = self.procs.pop(name)
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)

    def shutdown(self) -> None:
        for group in ("broker", "controller"):
            for n in [n for n in self.procs if n.startswith(group)]:
                self.procs[n].send_signal(signal.SIGTERM)
            deadline = time.time() + 20
            for n in [n for n in list(self.procs) if n.startswith(group)]:
                p = self.procs.pop(n)
                try:
                    p.wait(max(0.1, deadline - time.time()))
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)

    def log_text(self, name: str) -> str:
        with open(os.path.join(self.dir, f"{name}.log"), errors="replace") as f:
            return f.read()

    def active_controller(self) -> str | None:
        best = None
        for i in range(1, self.n_controllers + 1):
            n = f"controller-{i}"
            if n in self.procs and "became the active controller" in self.log_text(n):
                # the latest one to say so
                t = self.log_text(n).rsplit("became the active controller", 1)[0].rsplit("\n", 1)[-1][:23]
                if best is None or t > best[0]:
                    best = (t, n)
        return best[1] if best else None


def wait_until(fn, timeout: float, what: str, interval: float = 0.2):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            v = fn()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - retried until the deadline
            last = e
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error: {last!r})")


FAST = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "5000",
    "leader.imbalance.check.interval.seconds": "5",
}


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    rep = yield
    if rep.when == "call":
        item.failed_call = rep.failed
    return rep


@contextlib.contextmanager
def running_cluster(tmp_path, request, **kw):
    """A started Cluster, shut down afterwards; a failed test prints each node's last log lines."""
    c = Cluster(str(tmp_path), **kw)
    c.start()
    try:
        yield c
    finally:
        c.shutdown()
        if getattr(request.node, "failed_call", False):
            for name in c.configs:
                lines = [ln for ln in c.log_text(name).splitlines() if not ln.startswith("%")]
                print(f"---- {name} (last 20 lines) ----")
                print("\n".join(lines[-20:]))


@pytest.fixture
def cluster(tmp_path, request):
    with running_cluster(tmp_path, request, overrides=FAST) as c:
        yield c
