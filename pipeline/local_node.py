"""Start a throwaway single-process krafty node (broker+controller) on 127.0.0.1 for examples."""

from __future__ import annotations

import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common.ports import free_port

REPO = Path(__file__).resolve().parents[1]


def answers_api_versions(host: str, port: int, timeout: float = 1.0) -> bool:
    client_id = b"krafty-pipeline"
    body = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(struct.pack(">i", len(body)) + body)
            head = b""
            while len(head) < 10:
                chunk = s.recv(10 - len(head))
                if not chunk:
                    return False
                head += chunk
            _, corr, err = struct.unpack(">iih", head)
            return corr == 1 and err == 0
    except OSError:
        return False


class LocalKrafty:
    """``with LocalKrafty() as node: node.bootstrap`` — stopped with SIGTERM on exit. Its data goes
    in a temporary directory removed on stop, or in ``workdir`` (kept) when one is given."""

    def __init__(self, extra_config: dict | None = None, workdir: Path | None = None):
        self.extra = extra_config or {}
        self._keep_dir = workdir is not None
        self.dir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="krafty-node-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port, self.cport = free_port(), free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _has_broker(self, deadline: float) -> bool:
        """ApiVersions answers as soon as the listener is up; wait until Metadata lists a broker too."""
        import confluent_kafka as ck

        c = ck.Producer({"bootstrap.servers": self.bootstrap, "log_level": 0})
        try:
            while time.monotonic() < deadline:
                try:
                    if c.list_topics(timeout=2).brokers:
                        return True
                except ck.KafkaException:
                    time.sleep(0.3)
            return False
        finally:
            c.flush(0)

    def start(self, timeout: float = 60) -> LocalKrafty:
        lines = [
            "node.id=1",
            "process.roles=broker,controller",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.cport}",
            f"controller.quorum.voters=1@127.0.0.1:{self.cport}",
            f"log.dirs={self.dir}/data",
            "num.partitions=1",
            "cluster.id=a3JhZnR5LXRlc3Qtbm9kZQ",  # formats the empty data dir on first start
        ] + [f"{k}={v}" for k, v in self.extra.items()]
        cfg = self.dir / "server.properties"
        cfg.write_text("\n".join(lines) + "\n")
        log = open(self.dir / "node.log", "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "krafty", "node", "--config", str(cfg)],
            cwd=str(REPO),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"krafty exited with {self.proc.returncode}: {self.log_tail()}")
            if answers_api_versions("127.0.0.1", self.port):
                if self._has_broker(deadline):
                    return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"krafty did not answer ApiVersions in {timeout}s: {self.log_tail()}")

    def log_tail(self, n: int = 2000) -> str:
        try:
            return (self.dir / "node.log").read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if not self._keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> LocalKrafty:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class MockCluster:
    """librdkafka's in-process mock cluster (for trying the examples without a broker)."""

    def __init__(self):
        import confluent_kafka as ck

        self._owner = ck.Producer({"test.mock.num.brokers": 1, "log_level": 3})
        md = self._owner.list_topics(timeout=10)
        self.bootstrap = ",".join(f"{b.host}:{b.port}" for b in md.brokers.values())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._owner = None
