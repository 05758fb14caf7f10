"""Clusters the chaos harness runs and breaks: local processes on loopback, or processes in network
namespaces of their own (10.x addresses on a bridge this run creates).

Both give the nemeses the same handles: start/kill/stop/pause/resume a node by name, restart it with
a skewed clock, and a ``net`` that cuts links between nodes (iptables) and heals them. Everything a
run adds to the machine (iptables chains, cgroups, namespaces, a bridge) is removed by ``close()``.

Local mode identifies a node's packets by its cgroup (v2, ``-m cgroup --path``): its listener
ports tell where a connection goes, and a connmark set on each node's new connections tells whose
connection a reply belongs to, so "A cannot reach B" drops exactly A's packets to B.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from krafty.cluster import free_base_port, node_configs, write_properties

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
CGROUP2 = "/sys/fs/cgroup/unified" if os.path.isdir("/sys/fs/cgroup/unified") else "/sys/fs/cgroup"

# short session timeouts: faults are noticed in seconds, not tens of seconds
FAST = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "5000",
    "leader.imbalance.check.interval.seconds": "5",
}


def sh(*cmd: str, check: bool = True, quiet: bool = False) -> subprocess.CompletedProcess:
    r = subprocess.run(list(cmd), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr.strip() or r.stdout.strip()}")
    return r


def sh_all(jobs: list[tuple[list[str], str | None]], check: bool = True) -> list[subprocess.CompletedProcess]:
    """Runs every command (each with its stdin text, or None) at the same time and waits for all of
    them, so a fault that touches several nodes lands on them together: on a loaded machine one
    ``ip netns exec .. iptables`` took over a second, and a cut made one rule at a time was for ten
    seconds another fault than the one named (README.md, "Chaos testing")."""
    if not jobs:
        return []
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        results = list(pool.map(lambda j: subprocess.run(j[0], input=j[1], capture_output=True, text=True), jobs))
    if check:
        for (cmd, _), r in zip(jobs, results, strict=True):
            if r.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr.strip() or r.stdout.strip()}")
    return results


def restore_input(rules: list[str]) -> str:
    """``iptables-restore --noflush`` input adding ``rules`` to the filter table in one transaction."""
    return "*filter\n" + "".join(f"{r}\n" for r in rules) + "COMMIT\n"


def pair_rules(pairs, primary: set[str], address) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """The iptables rules that drop every packet of each ``(src, dst)`` pair, one at each end (src's
    OUTPUT to dst's address, dst's INPUT from src's), as ``(first, then)``: node -> its rules.

    ``first`` holds every rule of a ``primary`` node (the side that is cut off: the isolated node,
    the one nobody can send to, the minority), and of pairs with no primary end: each primary node's
    own rules already drop every packet of its pairs, so once ``first`` is in (one atomic restore per
    node, all nodes at once) the whole cut is. ``then`` adds the other ends' rules, which change only
    how a send fails (at once, EPERM, instead of unanswered)."""
    first: dict[str, list[str]] = {}
    then: dict[str, list[str]] = {}
    for src, dst in pairs:
        out_rule = (src, f"-A OUTPUT -d {address(dst)} -j DROP")
        in_rule = (dst, f"-A INPUT -s {address(src)} -j DROP")
        for (node, rule), other in ((out_rule, dst), (in_rule, src)):
            lead = node in primary or other not in primary
            (first if lead else then).setdefault(node, []).append(rule)
    return first, then


def python() -> str:
    venv = os.path.join(ROOT, ".venv", "bin", "python")
    return venv if os.path.exists(venv) else sys.executable


class Node:
    def __init__(self, name: str, props: dict[str, str], host: str, ports: list[int]):
        self.name = name
        self.props = props
        self.id = int(props["node.id"])
        self.role = "controller" if props["process.roles"] == "controller" else "broker"
        self.host = host
        self.ports = ports
        self.proc: subprocess.Popen | None = None
        self.paused = False
        self.skew_s = 0

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class BaseCluster:
    """Process handling shared by the deployments; subclasses say where a node runs."""

    mode = "?"

    def __init__(self, directory: str, controllers: int, brokers: int, overrides: dict[str, str] | None,
                 log=None):
        self.dir = os.path.abspath(directory)
        os.makedirs(self.dir, exist_ok=True)
        self.n_controllers, self.n_brokers = controllers, brokers
        self.overrides = {**FAST, **(overrides or {})}
        self.nodes: dict[str, Node] = {}
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.net = None

    # -- naming --------------------------------------------------------------------------------
    def by_id(self, node_id: int) -> Node:
        return next(n for n in self.nodes.values() if n.id == node_id)

    @property
    def controllers(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.role == "controller"]

    @property
    def brokers(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.role == "broker"]

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{n.host}:{n.ports[0]}" for n in self.brokers)

    def controller_addresses(self) -> dict[int, str]:
        return {n.id: f"{n.host}:{n.ports[0]}" for n in self.controllers}

    def cut(self, a: list[str], b: list[str], oneway: bool = False) -> None:
        """Nodes in ``a`` cannot reach nodes in ``b`` (and back, unless ``oneway``), all at once: the
        smaller side's rules land first, one transaction per node, so the cut never passes through
        other cuts on its way in (see ``pair_rules``)."""
        if self.net is None:
            raise RuntimeError(f"this {self.mode} cluster has no network control")
        pairs = [(x, y) for x in a for y in b]
        if not oneway:
            pairs += [(y, x) for x in a for y in b]
        self.net.block(pairs, primary=set(a if len(a) <= len(b) else b))

    # -- process control -----------------------------------------------------------------------
    def command(self, node: Node, config_path: str) -> list[str]:
        return [python(), "-m", "krafty", "node", "--config", config_path]

    def preexec(self, node: Node):
        return None

    def start(self, name: str, skew_s: int = 0) -> None:
        node = self.nodes[name]
        if node.alive:
            raise RuntimeError(f"{name} is already running")
        path = os.path.join(self.dir, f"{name}.properties")
        write_properties(path, node.props)
        env = dict(os.environ)
        env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        node.skew_s = skew_s
        if skew_s:
            # a fixed offset of the wall clock; the monotonic clock stays real (asyncio's timers)
            env.update(LD_PRELOAD=FAKETIME_LIB, FAKETIME=f"{skew_s:+d}", FAKETIME_DONT_FAKE_MONOTONIC="1")
        log = open(os.path.join(self.dir, f"{name}.log"), "ab")
        log.write(f"\n===== chaos: start at {time.strftime('%H:%M:%S')} skew {skew_s:+d}s =====\n".encode())
        log.flush()
        node.proc = subprocess.Popen(self.command(node, path), cwd=ROOT, env=env, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True,
                                     preexec_fn=self.preexec(node))
        log.close()
        node.paused = False

    def start_all(self) -> None:
        for name in self.nodes:
            self.start(name)

    def kill(self, name: str) -> None:
        node = self.nodes[name]
        if node.proc is not None and node.proc.poll() is None:
            node.proc.send_signal(signal.SIGKILL)
            node.proc.wait(10)
        node.paused = False

    def stop(self, name: str, timeout: float = 20) -> None:
        node = self.nodes[name]
        if node.proc is None or node.proc.poll() is not None:
            return
        if node.paused:
            self.resume(name)
        node.proc.send_signal(signal.SIGTERM)
        try:
            node.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            node.proc.kill()
            node.proc.wait(5)

    def pause(self, name: str) -> None:
        node = self.nodes[name]
        if node.alive:
            node.proc.send_signal(signal.SIGSTOP)
            node.paused = True

    def resume(self, name: str) -> None:
        node = self.nodes[name]
        if node.alive:
            node.proc.send_signal(signal.SIGCONT)
        node.paused = False

    def shutdown(self) -> None:
        for n in self.nodes.values():
            if n.paused:
                self.resume(n.name)
        for group in (self.brokers, self.controllers):
            for n in group:
                if n.alive:
                    n.proc.send_signal(signal.SIGTERM)
            deadline = time.time() + 20
            for n in group:
                if n.proc is not None:
                    try:
                        n.proc.wait(max(0.1, deadline - time.time()))
                    except subprocess.TimeoutExpired:
                        n.proc.kill()
                        n.proc.wait(5)

    def close(self) -> None:
        """Stop every node and remove whatever the run added to the machine. Idempotent."""
        try:
            if self.net is not None:
                self.net.heal()
        finally:
            try:
                self.shutdown()
            finally:
                if self.net is not None:
                    self.net.close()

    def log_tail(self, name: str, lines: int = 20) -> str:
        try:
            with open(os.path.join(self.dir, f"{name}.log"), errors="replace") as f:
                return "\n".join(f.read().splitlines()[-lines:])
        except OSError:
            return ""


class LocalNet:
    """iptables rules in the filter table's OUTPUT path (loopback traffic passes it once), in chains
    of this run's own; nodes are told apart by their cgroup."""

    def __init__(self, tag: str, nodes: list[Node]):
        self.tag = tag
        self.nodes = {n.name: n for n in nodes}
        self.chain = f"KCHAOS_{tag}"
        self.mark_chain = f"KCHAOSM_{tag}"
        self.cg_root = os.path.join(CGROUP2, f"kchaos-{tag}")
        self.mark = {n.name: 0x4B000 + n.id for n in nodes}
        self.rules = 0
        self.ready = False

    @staticmethod
    def available() -> str | None:
        """None when local partitions can work here, else why not."""
        if not sh("sh", "-c", "command -v iptables", check=False).stdout.strip():
            return "iptables is not installed (apt-get install iptables, or: make chaos-deps)"
        if os.geteuid() != 0:
            return "iptables needs root"
        if not os.path.exists(os.path.join(CGROUP2, "cgroup.procs")):
            return "no cgroup v2 hierarchy to tell the nodes' packets apart"
        return None

    def cgroup(self, name: str) -> str:
        return os.path.join(self.cg_root, name)

    def setup(self) -> None:
        why = self.available()
        if why:
            raise RuntimeError(f"network faults in local mode: {why}")
        for name in self.nodes:
            os.makedirs(self.cgroup(name), exist_ok=True)
        sh("iptables", "-w", "-N", self.chain)
        sh("iptables", "-w", "-N", self.mark_chain)
        self.ready = True
        sh("iptables", "-w", "-I", "OUTPUT", "-j", self.mark_chain)
        sh("iptables", "-w", "-I", "OUTPUT", "-j", self.chain)
        for name in self.nodes:
            sh("iptables", "-w", "-A", self.mark_chain, "-m", "cgroup", "--path", self._cgpath(name),
               "-m", "conntrack", "--ctstate", "NEW", "-j", "CONNMARK", "--set-mark", str(self.mark[name]))

    def _cgpath(self, name: str) -> str:
        return os.path.relpath(self.cgroup(name), CGROUP2)

    def preexec(self, name: str):
        procs = os.path.join(self.cgroup(name), "cgroup.procs")

        def enter():
            with open(procs, "w") as f:
                f.write(str(os.getpid()))
        return enter

    def block(self, pairs, primary: set[str] = frozenset()) -> None:
        """Drop every packet each src sends to its dst (to dst's listeners, and on connections dst
        opened); every rule in one ``iptables-restore``, so the whole cut lands at once."""
        rules = []
        for src, dst in pairs:
            cg = f"-m cgroup --path {self._cgpath(src)}"
            ports = ",".join(str(p) for p in self.nodes[dst].ports)
            rules.append(f"-A {self.chain} {cg} -p tcp -m multiport --dports {ports} -j DROP")
            rules.append(f"-A {self.chain} {cg} -m connmark --mark {self.mark[dst]} -j DROP")
        self._restore(rules)

    def loss(self, names: list[str], probability: float) -> None:
        """Drop a share of everything these nodes send (to nodes and clients)."""
        self._restore([f"-A {self.chain} -m cgroup --path {self._cgpath(n)} -m statistic --mode random "
                       f"--probability {probability:.3f} -j DROP" for n in names])

    def _restore(self, rules: list[str]) -> None:
        if rules:
            sh_all([(["iptables-restore", "-w", "--noflush"], restore_input(rules))])
            self.rules += len(rules)

    def heal(self) -> None:
        if self.ready:
            sh("iptables", "-w", "-F", self.chain, check=False)
        self.rules = 0

    def close(self) -> None:
        if self.ready:
            for ch in (self.chain, self.mark_chain):
                while sh("iptables", "-w", "-D", "OUTPUT", "-j", ch, check=False).returncode == 0:
                    pass
                sh("iptables", "-w", "-F", ch, check=False)
                sh("iptables", "-w", "-X", ch, check=False)
            self.ready = False
        for name in self.nodes:
            with contextlib.suppress(OSError):
                os.rmdir(self.cgroup(name))
        with contextlib.suppress(OSError):
            os.rmdir(self.cg_root)


class LocalCluster(BaseCluster):
    """Controllers and brokers as processes on 127.0.0.1 (like ``krafty cluster up``)."""

    mode = "local"

    def __init__(self, directory: str, controllers: int = 3, brokers: int = 3, overrides=None,
                 network: bool = False, log=None):
        super().__init__(directory, controllers, brokers, overrides, log)
        self.base = free_base_port()
        for name, props in node_configs(controllers, brokers, self.base, self.dir, extra=self.overrides):
            port = int(props["listeners"].rsplit(":", 1)[1])
            self.nodes[name] = Node(name, props, "127.0.0.1", [port])
        if network:
            self.net = LocalNet(str(os.getpid()), list(self.nodes.values()))
            self.net.setup()

    def preexec(self, node: Node):
        return self.net.preexec(node.name) if self.net is not None else None


class NetnsNet:
    """iptables inside each node's namespace: INPUT/OUTPUT by peer address."""

    def __init__(self, cluster: NetnsCluster):
        self.c = cluster
        self.rules = 0
        self.primary: set[str] = set()  # nodes whose rules alone make the current fault (healed last)

    def block(self, pairs, primary: set[str] = frozenset()) -> None:
        """Drop every packet of each (src, dst) pair: the primary nodes' rules first, one atomic
        ``iptables-restore`` per node and all nodes at once, then the other ends' (``pair_rules``)."""
        first, then = pair_rules(pairs, primary, lambda n: self.c.nodes[n].host)
        self._restore(first)
        self.primary |= set(first)
        self._restore(then)

    def loss(self, names: list[str], probability: float) -> None:
        """Drop a share of everything these nodes send (to nodes and clients), on all at once."""
        self._restore({n: [f"-A OUTPUT -m statistic --mode random --probability {probability:.3f} -j DROP"]
                       for n in names})
        self.primary |= set(names)

    def _restore(self, rules: dict[str, list[str]]) -> None:
        sh_all([(["ip", "netns", "exec", self.c.ns(n), "iptables-restore", "-w", "--noflush"], restore_input(r))
                for n, r in rules.items()])
        self.rules += sum(len(r) for r in rules.values())

    def heal(self) -> None:
        """Flush every node's rules, the primary nodes' last (and each at once), so a fault ends
        whole: until then their rules alone keep it in place."""
        names = [n for n in self.c.nodes if n in self.c.created_ns]
        for group in ([n for n in names if n not in self.primary], [n for n in names if n in self.primary]):
            sh_all([(["ip", "netns", "exec", self.c.ns(n), "iptables", "-w", "-F"], None) for n in group],
                   check=False)
        self.primary = set()
        self.rules = 0

    def close(self) -> None:
        self.c.teardown_namespaces()


class NetnsCluster(BaseCluster):
    """Every node in a network namespace of its own, on a bridge: 10.213.K.1 is this host (the
    clients), nodes are 10.213.K.10+. Brokers listen on 9092, controllers on 9093, each at its own
    address."""

    mode = "netns"

    def __init__(self, directory: str, controllers: int = 3, brokers: int = 3, overrides=None, log=None):
        super().__init__(directory, controllers, brokers, overrides, log)
        self.tag = str(os.getpid() % 100000)
        k = 20 + os.getpid() % 200
        self.subnet = f"10.213.{k}"
        self.bridge = f"kcb{self.tag}"
        self.created_ns: set[str] = set()
        self.bridge_up = False
        self.forward_rule = False
        configs = node_configs(controllers, brokers, 9092, self.dir, extra=self.overrides)
        names = [n for n, _ in configs]
        ips = {name: f"{self.subnet}.{10 + i}" for i, name in enumerate(names)}
        voters = ",".join(f"{p['node.id']}@{ips[n]}:9093" for n, p in configs if p["process.roles"] == "controller")
        for name, props in configs:
            ip = ips[name]
            props["controller.quorum.voters"] = voters
            if props["process.roles"] == "controller":
                props["listeners"] = f"CONTROLLER://{ip}:9093"
                port = 9093
            else:
                props["listeners"] = f"PLAINTEXT://{ip}:9092"
                port = 9092
            self.nodes[name] = Node(name, props, ip, [port])
        self.net = NetnsNet(self)
        try:
            self.setup_namespaces()
        except Exception:
            self.teardown_namespaces()
            raise

    def ns(self, name: str) -> str:
        return f"kc{self.tag}-{name}"

    def setup_namespaces(self) -> None:
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        self.bridge_up = True
        sh("ip", "addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        # with br_netfilter loaded (docker does that), bridged packets cross the host's FORWARD chain,
        # whose policy may be DROP: let this bridge's own traffic through
        sh("iptables", "-w", "-I", "FORWARD", "-i", self.bridge, "-o", self.bridge, "-j", "ACCEPT")
        self.forward_rule = True
        for i, (name, node) in enumerate(self.nodes.items()):
            ns = self.ns(name)
            sh("ip", "netns", "add", ns)
            self.created_ns.add(name)
            host_if, peer_if = f"kcv{self.tag}n{i}"[:15], f"kcp{self.tag}n{i}"[:15]
            sh("ip", "link", "add", host_if, "type", "veth", "peer", "name", peer_if)
            sh("ip", "link", "set", peer_if, "netns", ns)
            sh("ip", "link", "set", host_if, "master", self.bridge)
            sh("ip", "link", "set", host_if, "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", peer_if, "name", "eth0")
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{node.host}/24", "dev", "eth0")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up")

    def teardown_namespaces(self) -> None:
        for name in list(self.created_ns):
            sh("ip", "netns", "del", self.ns(name), check=False)
            self.created_ns.discard(name)
        if self.forward_rule:
            sh("iptables", "-w", "-D", "FORWARD", "-i", self.bridge, "-o", self.bridge, "-j", "ACCEPT", check=False)
            self.forward_rule = False
        if self.bridge_up:
            sh("ip", "link", "del", self.bridge, check=False)
            self.bridge_up = False

    def command(self, node: Node, config_path: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns(node.name), *super().command(node, config_path)]


def make_cluster(mode: str, directory: str, network: bool, overrides=None, log=None) -> BaseCluster:
    if mode == "local":
        return LocalCluster(directory, overrides=overrides, network=network, log=log)
    if mode == "netns":
        if os.geteuid() != 0:
            raise RuntimeError("--cluster netns needs root (ip netns, iptables)")
        return NetnsCluster(directory, overrides=overrides, log=log)
    if mode == "compose":
        from chaos.compose import ComposeCluster
        return ComposeCluster(directory, overrides=overrides, log=log)
    raise ValueError(f"unknown cluster mode {mode!r}")
