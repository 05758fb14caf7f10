"""A Spark standalone cluster (one master, N workers) started from the pyspark installation, on
127.0.0.1 — what `make test-spark` and `make pipeline-bench` submit jobs to.

    with StandaloneSpark(workers=2) as cluster:
        spark = pipeline.session("job", master=cluster.master_url)

The master and each worker are JVMs started with ``bin/spark-class``
(``org.apache.spark.deploy.master.Master`` / ``...worker.Worker``), each in a process group of
its own so that ``stop`` also ends the executors a worker launched; ``kill_worker`` is a
``kill -9`` of one worker's JVM (its executor exits when it loses the worker, as on a real
cluster). Logs and work directories are in ``directory``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from common.ports import free_port


def spark_home() -> str:
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


class StandaloneSpark:
    def __init__(self, workers: int = 2, cores: int = 1, memory: str = "2g", directory: str | None = None,
                 worker_timeout_s: int = 10):
        self.n_workers, self.cores, self.memory = workers, cores, memory
        self.dir = Path(directory or tempfile.mkdtemp(prefix="krafty-spark-standalone-"))
        self._own_dir = directory is None
        self.port, self.ui_port = free_port(), free_port()
        self.worker_timeout_s = worker_timeout_s
        self.master: subprocess.Popen | None = None
        self.workers: dict[int, subprocess.Popen] = {}
        self.worker_ports: dict[int, int] = {}

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _env(self) -> dict:
        env = dict(os.environ)
        env.update({"SPARK_HOME": spark_home(), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_MASTER_HOST": "127.0.0.1",
                    "SPARK_NO_DAEMONIZE": "1", "SPARK_LOG_DIR": str(self.dir), "SPARK_CONF_DIR": str(self.dir)})
        return env

    def _props(self) -> str:
        path = self.dir / "spark-standalone.conf"
        path.write_text("\n".join([
            "spark.master.rest.enabled false",
            f"spark.worker.timeout {self.worker_timeout_s}",  # a killed worker is declared dead this fast
            "spark.ui.enabled false",
            "spark.worker.cleanup.enabled false",
            "",
        ]))
        return str(path)

    def _spawn(self, cls: str, args: list[str], log_name: str) -> subprocess.Popen:
        log = open(self.dir / log_name, "ab")
        try:
            return subprocess.Popen([os.path.join(spark_home(), "bin", "spark-class"), cls, *args],
                                    env=self._env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            log.close()

    def start(self, timeout: float = 180) -> StandaloneSpark:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.master = self._spawn("org.apache.spark.deploy.master.Master",
                                  ["--host", "127.0.0.1", "--port", str(self.port), "--webui-port",
                                   str(self.ui_port), "--properties-file", self._props()], "master.log")
        self._wait(lambda: _listening(self.port), timeout, "the Spark master to listen", self.master, "master.log")
        for i in range(self.n_workers):
            self.start_worker(i)
        self._wait(lambda: self.alive_workers() >= self.n_workers, timeout, f"{self.n_workers} workers to register",
                   self.master, "master.log")
        return self

    def start_worker(self, i: int) -> None:
        port = self.worker_ports.get(i) or free_port()
        self.worker_ports[i] = port
        work = self.dir / f"work-{i}"
        work.mkdir(exist_ok=True)
        self.workers[i] = self._spawn("org.apache.spark.deploy.worker.Worker",
                                      ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(free_port()),
                                       "--cores", str(self.cores), "--memory", self.memory, "--work-dir", str(work),
                                       "--properties-file", self._props(), self.master_url], f"worker-{i}.log")

    def alive_workers(self) -> int:
        """Workers the master lists as ALIVE (its web UI's JSON)."""
        import json
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
                doc = json.load(r)
        except (OSError, ValueError):
            return 0
        return sum(1 for w in doc.get("workers", []) if w.get("state") == "ALIVE")

    def _wait(self, cond, timeout: float, what: str, proc: subprocess.Popen, log_name: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if cond():
                return
            if proc.poll() is not None:
                raise RuntimeError(f"{log_name[:-4]} exited with {proc.returncode}:\n{self.log_tail(log_name)}")
            time.sleep(0.3)
        raise RuntimeError(f"timed out after {timeout}s waiting for {what}:\n{self.log_tail(log_name)}")

    def log_tail(self, name: str, n: int = 3000) -> str:
        try:
            return (self.dir / name).read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def kill_worker(self, i: int) -> None:
        """``kill -9`` of worker ``i``'s JVM (not its executor: that one notices on its own)."""
        p = self.workers.pop(i)
        p.send_signal(signal.SIGKILL)
        p.wait(10)
        self._orphans = getattr(self, "_orphans", []) + [p.pid]

    def _stop_group(self, p: subprocess.Popen, timeout: float = 20) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                return
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                continue
            if sig == signal.SIGTERM:
                # the group may hold an executor still shutting down
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline and _group_alive(p.pid):
                    time.sleep(0.2)
                if not _group_alive(p.pid):
                    return

    def stop(self) -> None:
        for i in list(self.workers):
            self._stop_group(self.workers.pop(i))
        for pgid in getattr(self, "_orphans", []):  # executors of killed workers, if still there
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.master is not None:
            self._stop_group(self.master)
            self.master = None
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> StandaloneSpark:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
