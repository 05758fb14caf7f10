"""The docker-compose deployment (``deploy/docker-compose.yml``) as a chaos cluster.

The run brings up a compose project of its own (its own name, volumes and published ports, the
image given by ``KRAFTY_IMAGE``, default ``krafty:latest``, which must already be built), with the
chaos session timeouts appended to every service's command as ``--override`` options. Nemeses act
on containers: ``docker kill -s KILL`` / ``docker start``, ``docker pause`` / ``unpause`` (the
cgroup freezer), and iptables rules inside a container's network namespace (entered with
``nsenter``) for partitions. Clock skew would need libfaketime in the image: not supported here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

from chaos.cluster import ROOT, BaseCluster, Node, pair_rules, restore_input, sh, sh_all
from common.ports import free_port

COMPOSE_FILE = os.path.join(ROOT, "deploy", "docker-compose.yml")


def compose_command() -> list[str] | None:
    """``docker compose`` (v2 plugin) or ``docker-compose`` (v1), whichever works."""
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def unavailable(image: str, compose_file: str = COMPOSE_FILE) -> str | None:
    """None when a compose cluster can run here, else why not (and what to do)."""
    if not shutil.which("docker"):
        return "docker is not installed (Debian: apt-get install docker.io docker-compose)"
    if compose_command() is None:
        return "neither `docker compose` nor `docker-compose` is available (Debian: apt-get install docker-compose)"
    r = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True)
    if r.returncode != 0:
        return (f"the docker daemon does not answer ({(r.stderr or r.stdout).strip()[:200]}): "
                "start one (deploy/docker-engine.sh start)")
    if not os.path.exists(compose_file):
        return f"{compose_file} is missing"
    if subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode != 0:
        return (f"image {image} is not built: docker compose -f deploy/docker-compose.yml build "
                "(or set KRAFTY_IMAGE to a built krafty image)")
    if not shutil.which("nsenter") or not shutil.which("iptables"):
        return "network faults need nsenter and iptables (Debian: util-linux, iptables)"
    return None


class ComposeNode(Node):
    def __init__(self, name: str, props: dict[str, str], host: str, ports: list[int]):
        super().__init__(name, props, host, ports)
        self.up = False
        self.container = ""

    @property
    def alive(self) -> bool:
        return self.up


class ComposeNet:
    """iptables inside each container's network namespace, by peer address (like NetnsNet: one
    atomic ``iptables-restore`` per container, all containers at once, the cut-off side's first).

    A container that is down (killed by another fault at the same time) has no namespace: its
    rules are kept and applied when it starts again (a restarted container gets a new one)."""

    def __init__(self, cluster: ComposeCluster):
        self.c = cluster
        self.rules = 0
        self.wanted: dict[str, list[str]] = {}
        self.primary: set[str] = set()  # containers whose rules alone make the current fault (healed last)

    def _nsenter(self, name: str) -> list[str] | None:
        pid = self.c.inspect(name, "{{.State.Pid}}") if self.c.nodes[name].up else ""
        return None if pid in ("", "0") else ["nsenter", "-t", pid, "-n"]

    def _restore(self, rules: dict[str, list[str]]) -> None:
        jobs = []
        for name, r in rules.items():
            self.wanted.setdefault(name, []).extend(r)
            self.rules += len(r)
            enter = self._nsenter(name)
            if enter is not None:
                jobs.append(([*enter, "iptables-restore", "-w", "--noflush"], restore_input(r)))
        sh_all(jobs)

    def restarted(self, name: str) -> None:
        enter = self._nsenter(name)
        if enter is not None and self.wanted.get(name):
            sh_all([([*enter, "iptables-restore", "-w", "--noflush"], restore_input(self.wanted[name]))])

    def block(self, pairs, primary: set[str] = frozenset()) -> None:
        first, then = pair_rules(pairs, primary, lambda n: self.c.ip[n])
        self._restore(first)
        self.primary |= set(first)
        self._restore(then)

    def loss(self, names: list[str], probability: float) -> None:
        self._restore({n: [f"-A OUTPUT -m statistic --mode random --probability {probability:.3f} -j DROP"]
                       for n in names})
        self.primary |= set(names)

    def heal(self) -> None:
        self.wanted.clear()
        for group in ([n for n in self.c.nodes if n not in self.primary], [n for n in self.c.nodes if n in self.primary]):
            jobs = [([*enter, "iptables", "-w", "-F"], None) for n in group if (enter := self._nsenter(n)) is not None]
            sh_all(jobs, check=False)
        self.primary = set()
        self.rules = 0

    def close(self) -> None:
        pass


class ComposeCluster(BaseCluster):
    mode = "compose"

    def __init__(self, directory: str, overrides=None, log=None, compose_file: str = COMPOSE_FILE):
        import yaml  # the compose file's own format; PyYAML is a test dependency

        super().__init__(directory, 3, 3, overrides, log)
        self.image = os.environ.get("KRAFTY_IMAGE", "krafty:latest")
        why = unavailable(self.image, compose_file)
        if why:
            raise RuntimeError(f"compose mode: {why}")
        self.file = compose_file
        self.project = f"kchaos{os.getpid()}"
        self.compose = compose_command()
        self.env = dict(os.environ, KRAFTY_IMAGE=self.image, KRAFTY_EXTERNAL_HOST="127.0.0.1")
        self.ip: dict[str, str] = {}
        self.project_up = False
        cfg = yaml.safe_load(self._compose("-f", self.file, "config"))
        published: dict[str, int] = {}
        for name, svc in cfg["services"].items():
            if not name.startswith("broker"):
                continue
            nid = self._node_id(svc)
            port = free_port()
            self.env[f"KRAFTY_PORT_{nid}"] = str(port)
            published[name] = port
        cfg = yaml.safe_load(self._compose("-f", self.file, "config"))  # again, with the ports chosen
        extra = []
        for k, v in self.overrides.items():
            extra += ["--override", f"{k}={v}"]
        override = {"version": cfg.get("version", "3.8"), "services": {}} if "version" in cfg else {"services": {}}
        for name, svc in cfg["services"].items():
            if not (svc.get("command") or [None])[0] == "node":  # not a krafty node (the prometheus service)
                continue
            cmd = list(svc["command"])
            override["services"][name] = {"command": cmd + extra, "image": self.image}
            nid = self._node_id(svc)
            props = {"node.id": str(nid), "process.roles": "broker" if name.startswith("broker") else "controller"}
            if name in published:
                self.nodes[name] = ComposeNode(name, props, "127.0.0.1", [published[name]])
            else:
                self.nodes[name] = ComposeNode(name, props, "", [9093])
        self.override_file = os.path.join(self.dir, "docker-compose.chaos.yml")
        with open(self.override_file, "w") as f:
            json.dump(override, f, indent=1)  # JSON is YAML
        self.net = ComposeNet(self)

    @staticmethod
    def _node_id(svc: dict) -> int:
        for arg in svc.get("command") or []:
            if str(arg).startswith("node.id="):
                return int(str(arg).split("=", 1)[1])
        raise RuntimeError(f"compose service without --override node.id=N: {svc.get('command')}")

    def _compose(self, *args: str) -> str:
        r = subprocess.run([*self.compose, "-p", self.project, *args], capture_output=True, text=True,
                           env=self.env, cwd=ROOT)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(self.compose)} {' '.join(args)} failed: {r.stderr.strip()[-500:]}")
        return r.stdout

    def _files(self) -> list[str]:
        return ["-f", self.file, "-f", self.override_file]

    def inspect(self, name: str, fmt: str) -> str:
        r = sh("docker", "inspect", "-f", fmt, self.nodes[name].container, check=False)
        return r.stdout.strip() if r.returncode == 0 else ""

    def _refresh(self, name: str) -> None:
        node = self.nodes[name]
        ip = self.inspect(name, "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}").split()
        if ip:
            self.ip[name] = ip[0]
            if node.role == "controller":
                node.host = ip[0]

    # -- process control -----------------------------------------------------------------------
    def start_all(self) -> None:
        self.project_up = True
        self.log(f"docker compose up of {self.image} (session timeouts: {self.override_file}) "
                 f"as compose project {self.project}")
        self._compose(*self._files(), "up", "-d", "--no-build", *self.nodes)  # the nodes, not prometheus
        for name, node in self.nodes.items():
            node.container = self._compose(*self._files(), "ps", "-q", name).strip()
            if not node.container:
                raise RuntimeError(f"compose did not start {name}")
            node.up = True
            self._refresh(name)

    def start(self, name: str, skew_s: int = 0) -> None:
        if skew_s:
            raise RuntimeError("clock skew is not supported in compose mode (no libfaketime in the image)")
        sh("docker", "start", self.nodes[name].container)
        self.nodes[name].up = True
        self.nodes[name].paused = False
        self._refresh(name)
        self.net.restarted(name)

    def kill(self, name: str) -> None:
        sh("docker", "kill", "-s", "KILL", self.nodes[name].container, check=False)
        sh("docker", "wait", self.nodes[name].container, check=False)
        self.nodes[name].up = False
        self.nodes[name].paused = False

    def stop(self, name: str, timeout: float = 20) -> None:
        if self.nodes[name].paused:
            self.resume(name)
        sh("docker", "stop", "-t", str(int(timeout)), self.nodes[name].container, check=False)
        self.nodes[name].up = False

    def pause(self, name: str) -> None:
        if self.nodes[name].up:
            sh("docker", "pause", self.nodes[name].container)
            self.nodes[name].paused = True

    def resume(self, name: str) -> None:
        if self.nodes[name].paused:
            sh("docker", "unpause", self.nodes[name].container, check=False)
        self.nodes[name].paused = False

    def shutdown(self) -> None:
        for n in self.nodes.values():
            if n.paused:
                self.resume(n.name)
        for n in self.nodes.values():
            if n.container:
                with open(os.path.join(self.dir, f"{n.name}.log"), "w") as f:
                    subprocess.run(["docker", "logs", n.container], stdout=f, stderr=subprocess.STDOUT)
        if self.project_up:
            self._compose(*self._files(), "down", "-v", "--remove-orphans", "-t", "20")
            self.project_up = False
        for n in self.nodes.values():
            n.up = False

    def log_tail(self, name: str, lines: int = 20) -> str:
        path = os.path.join(self.dir, f"{name}.log")
        if os.path.exists(path):
            return super().log_tail(name, lines)
        if not self.nodes[name].container:
            return ""
        r = subprocess.run(["docker", "logs", "--tail", str(lines), self.nodes[name].container],
                           capture_output=True, text=True)
        return (r.stdout + r.stderr).strip()
