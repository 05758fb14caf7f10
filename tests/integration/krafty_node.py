"""Process-level handles on a krafty node (and on librdkafka's mock cluster).

No pytest in here: `bench/` and the multi-node suites import this module too.

    node = KraftyNode(workdir, node_id=1)
    node.start()            # writes server.properties, spawns, waits until ready
    node.bootstrap          # "127.0.0.1:PORT"
    node.kill()             # SIGKILL the process group (a crash)
    node.restart()          # same ports, same data dir
    node.stop()             # SIGTERM, waits for a clean exit, returns the exit code
    node.close()            # idempotent: stop (or kill) whatever is still running

Everything runs in its own process group (start_new_session) so that stop/kill
reach children too. Only 127.0.0.1 is used.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common.ports import free_port  # noqa: F401 (re-exported to the tests)

REPO = Path(__file__).resolve().parents[2]


def krafty_python() -> str:
    """The interpreter that runs krafty: $KRAFTY_PYTHON, else the repo venv, else ours."""
    env = os.environ.get("KRAFTY_PYTHON")
    if env:
        return env
    venv = REPO / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable




def api_versions_ok(host: str, port: int, timeout: float = 2.0) -> bool:
    """Send a raw ApiVersions v0 request; True when a well-formed answer with error 0 comes back."""
    client_id = b"krafty-it-probe"
    body = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(struct.pack(">i", len(body)) + body)
            head = _recv_exact(s, 4)
            (size,) = struct.unpack(">i", head)
            if size < 6 or size > 1 << 20:
                return False
            payload = _recv_exact(s, size)
            corr, err = struct.unpack(">ih", payload[:6])
            return corr == 1 and err == 0
    except OSError:
        return False


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    return buf


def metadata_brokers(bootstrap: str, timeout: float = 5.0) -> dict:
    """{node_id: 'host:port'} from a Metadata request made with confluent-kafka's AdminClient."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": int(timeout * 1000)})
    md = admin.list_topics(timeout=timeout)
    return {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()}


class NodeError(RuntimeError):
    pass


# the cluster id of test nodes: with it in server.properties a node formats its empty
# directories on first start (krafty/storage.py)
TEST_CLUSTER_ID = "a3JhZnR5LXRlc3Qtbm9kZQ"


class KraftyNode:
    """One `python -m krafty node` process with a server.properties of our making."""

    def __init__(
        self,
        workdir: str | os.PathLike,
        node_id: int = 1,
        *,
        port: int | None = None,
        controller_port: int | None = None,
        voters: str | None = None,
        process_roles: str = "broker,controller",
        overrides: dict[str, str] | None = None,
        extra_properties: dict[str, str] | None = None,
        python: str | None = None,
        start_timeout: float = 90.0,
        memory_limit_mb: int | None = None,
    ):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.node_id = node_id
        self.port = port or free_port()
        self.controller_port = controller_port or free_port()
        self.voters = voters or f"{node_id}@127.0.0.1:{self.controller_port}"
        self.process_roles = process_roles
        self.overrides = dict(overrides or {})
        self.extra_properties = dict(extra_properties or {})
        self.python = python or krafty_python()
        self.start_timeout = start_timeout
        # RLIMIT_AS of the node process: a hostile-input regression then fails the test (the
        # node dies with MemoryError or is refused memory) instead of exhausting the machine.
        # An idle node maps ~750 MB of address space (thread stacks, malloc arenas).
        self.memory_limit_mb = memory_limit_mb
        self.data_dir = self.workdir / "data"
        self.config_path = self.workdir / "server.properties"
        self.log_path = self.workdir / f"node-{node_id}.log"
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    # ----------------------------------------------------------------- info
    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "<no log>"
        return "\n".join(text.splitlines()[-lines:])

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<KraftyNode {self.node_id} {self.bootstrap} {state} {self.workdir}>"

    # --------------------------------------------------------------- config
    def properties(self) -> dict[str, str]:
        props = {
            "node.id": str(self.node_id),
            "process.roles": self.process_roles,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "controller.quorum.voters": self.voters,
            "log.dirs": str(self.data_dir),
            "num.partitions": "1",
            "cluster.id": TEST_CLUSTER_ID,  # formats the empty data dir on first start
        }
        props.update(self.extra_properties)
        return props

    def write_config(self) -> Path:
        body = "".join(f"{k}={v}\n" for k, v in self.properties().items())
        self.config_path.write_text(body)
        return self.config_path

    def command(self) -> list[str]:
        cmd = [self.python, "-m", "krafty", "node", "--config", str(self.config_path)]
        for k, v in self.overrides.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd

    # ------------------------------------------------------------ lifecycle
    def spawn(self) -> None:
        """Start the process without waiting for readiness."""
        if self.running:
            raise NodeError(f"{self!r} is already running")
        self.write_config()
        self.starts += 1
        log = open(self.log_path, "ab")
        log.write(f"\n===== krafty-it: start #{self.starts} at {time.strftime('%H:%M:%S')} =====\n".encode())
        log.flush()
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.setdefault("PYTHONUNBUFFERED", "1")
        try:
            self.proc = subprocess.Popen(
                self.command(),
                cwd=str(REPO),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=self._limit_memory if self.memory_limit_mb else None,
            )
        finally:
            log.close()

    def _limit_memory(self) -> None:
        import resource

        limit = self.memory_limit_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    def rss_mb(self) -> float:
        """Resident set size of the node process now (0 when it is not running)."""
        if not self.running:
            return 0.0
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return 0.0

    def start(self, timeout: float | None = None) -> KraftyNode:
        self.spawn()
        try:
            self.wait_ready(timeout or self.start_timeout)
        except BaseException:
            self.kill()
            raise
        return self

    def wait_ready(self, timeout: float) -> None:
        """Ready = answers ApiVersions and Metadata lists this node as a broker."""
        deadline = time.monotonic() + timeout
        last = "no attempt yet"
        while time.monotonic() < deadline:
            if not self.running:
                code = self.proc.returncode if self.proc else None
                raise NodeError(
                    f"krafty node {self.node_id} exited with code {code} during startup; "
                    f"command: {' '.join(self.command())}\n--- log tail ({self.log_path}) ---\n{self.log_tail()}"
                )
            if api_versions_ok(self.host, self.port, timeout=2.0):
                if "broker" not in self.process_roles:
                    return
                try:
                    brokers = metadata_brokers(self.bootstrap, timeout=5.0)
                    if brokers:
                        return
                    last = "Metadata lists no brokers yet"
                except Exception as e:  # noqa: BLE001 - retried until the deadline
                    last = f"Metadata failed: {e}"
            else:
                last = "no ApiVersions answer"
            time.sleep(0.2)
        raise NodeError(
            f"krafty node {self.node_id} not ready on {self.bootstrap} after {timeout:.0f}s ({last}); "
            f"command: {' '.join(self.command())}\n--- log tail ({self.log_path}) ---\n{self.log_tail()}"
        )

    def _signal_group(self, sig: int) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM and wait. Returns the exit code; SIGKILLs (and raises) if it does not exit in time."""
        if self.proc is None:
            return None
        if self.proc.poll() is not None:
            self._signal_group(signal.SIGKILL)  # stray children
            return self.proc.returncode
        self._signal_group(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._signal_group(signal.SIGKILL)
            self.proc.wait(10)
            raise NodeError(
                f"krafty node {self.node_id} ignored SIGTERM for {timeout:.0f}s and was SIGKILLed\n"
                f"--- log tail ---\n{self.log_tail()}"
            ) from None
        self._signal_group(signal.SIGKILL)  # stray children, if any
        return code

    def kill(self) -> None:
        """SIGKILL the whole process group: a crash."""
        if self.proc is None:
            return
        self._signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(15)

    def restart(self, timeout: float | None = None, graceful: bool = True) -> KraftyNode:
        if self.running:
            if graceful:
                self.stop()
            else:
                self.kill()
        return self.start(timeout)

    def close(self) -> None:
        """Stop whatever is still running; never raises."""
        try:
            if self.running:
                self.stop(timeout=15)
        except Exception:  # noqa: BLE001
            pass
        finally:
            self.kill()


class MockCluster:
    """librdkafka's built-in mock cluster, hosted by a throwaway Producer in a child process.

    Same surface as KraftyNode where that makes sense (bootstrap, start, close); it has no
    durable state, so restart/kill are not available.
    """

    SCRIPT = r"""
import logging, re, sys, threading, confluent_kafka
found = threading.Event(); bs = []
class H(logging.Handler):
    def emit(self, rec):
        m = re.search(r"bootstrap\.servers=(\S+)", rec.getMessage())
        if m and not bs:
            bs.append(m.group(1)); found.set()
lg = logging.getLogger("mock"); lg.addHandler(H()); lg.setLevel(logging.DEBUG)
conf = {"bootstrap.servers": "unused:1", "test.mock.num.brokers": int(sys.argv[1]),
        "debug": "mock", "logger": lg}
p = confluent_kafka.Producer(conf)
p.poll(0)
if not found.wait(30):
    sys.exit("mock cluster did not report its bootstrap servers")
print("BOOTSTRAP " + bs[0], flush=True)
lg.setLevel(logging.WARNING)
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
while not done.is_set():   # lives until the parent closes our stdin or kills us
    p.poll(0.2)            # serve (and drop) the debug log queue
"""

    def __init__(self, num_brokers: int = 1, python: str | None = None):
        self.num_brokers = num_brokers
        self.python = python or sys.executable
        self.proc: subprocess.Popen | None = None
        self.bootstrap: str | None = None
        self.workdir = Path(tempfile.gettempdir())

    @property
    def port(self) -> int:
        return int(self.bootstrap.rsplit(":", 1)[1])

    @property
    def host(self) -> str:
        return self.bootstrap.rsplit(":", 1)[0]

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 30.0) -> MockCluster:
        self.proc = subprocess.Popen(
            [self.python, "-c", self.SCRIPT, str(self.num_brokers)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            text=True,
        )
        deadline = time.monotonic() + timeout
        line = ""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith("BOOTSTRAP "):
                self.bootstrap = line.split()[1]
                break
            if not line and self.proc.poll() is not None:
                break
        if not self.bootstrap:
            self.close()
            raise NodeError(f"mock cluster failed to start: {line!r}")
        host, port = self.bootstrap.rsplit(":", 1)
        while time.monotonic() < deadline and not api_versions_ok(host, int(port)):
            time.sleep(0.1)
        return self

    def log_tail(self, lines: int = 60) -> str:
        return "<mock cluster: no log>"

    def close(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(Exception):
            self.proc.stdin.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)

    stop = close


def wait_until(predicate, timeout: float, interval: float = 0.2, message: str = "condition"):
    """Poll predicate() until it returns something truthy; return it, or raise TimeoutError."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as e:  # noqa: BLE001 - retried until the deadline
            last_exc = e
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"timed out after {timeout:.0f}s waiting for {message}; last error: {last_exc!r}"
            )
        time.sleep(interval)


__all__ = ["KraftyNode", "MockCluster", "NodeError", "free_port", "api_versions_ok", "wait_until", "REPO"]

if __name__ == "__main__":  # tiny manual check: python tests/integration/krafty_node.py
    with tempfile.TemporaryDirectory() as d:
        n = KraftyNode(d)
        try:
            n.start()
            print("ready", n.bootstrap, metadata_brokers(n.bootstrap))
        finally:
            n.close()
        print(re.sub(r"\n+", "\n", n.log_tail(20)))


def start_or_fail(node: KraftyNode) -> KraftyNode:
    """Start ``node`` for a test or fixture; if it does not come up, close it and fail the
    test with the node's error (its log tail), not a traceback."""
    import pytest

    try:
        return node.start()
    except NodeError as e:
        node.close()
        pytest.fail(f"krafty did not start: {e}", pytrace=False)
