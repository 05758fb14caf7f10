"""Free TCP ports for test clusters and ``krafty cluster up`` on loopback."""

from __future__ import annotations

import socket
import threading

from common.clock import SYSTEM


def _port_range() -> tuple[int, int]:
    """Where test and ``cluster up`` ports are drawn: below the kernel's ephemeral range. A port
    from that range (what ``bind(0)`` gives) may be taken as the local port of any outgoing
    connection between the check and the node's own bind, which on a busy machine (client
    tests, other clusters) happened."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
    except (OSError, ValueError):
        lo, hi = 32768, 60999
    return (10000, lo) if lo - 200 > 10000 else (hi + 1, 65536)


def _free(host: str, ports) -> bool:
    for port in ports:
        with socket.socket() as t:
            # as the listeners bind (asyncio sets SO_REUSEADDR): a port whose old connections
            # wait in TIME_WAIT is free for them (a busy machine has thousands of those)
            t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                t.bind((host, port))
            except OSError:
                return False
    return True


_port_lock = threading.Lock()
_handed_out: set[int] = set()


def free_port(host: str = "127.0.0.1") -> int:
    """A free TCP port on ``host``, outside the ephemeral range, never the same twice per process."""
    start, end = _port_range()
    with _port_lock:
        for _ in range(500):
            port = SYSTEM.rng.randrange(start, end)
            if port not in _handed_out and _free(host, (port,)):
                _handed_out.add(port)
                return port
    raise RuntimeError("no free port")


def free_base_port(host: str = "127.0.0.1") -> int:
    """A base port P with P..P+9 (brokers) and P+100..P+109 (controllers) free on ``host``."""
    start, end = _port_range()
    with _port_lock:
        for _ in range(200):
            base = SYSTEM.rng.randrange(start, end - 110)
            ports = [*range(base, base + 10), *range(base + 100, base + 110)]
            if not _handed_out.intersection(ports) and _free(host, ports):
                _handed_out.update(ports)
                return base
    raise RuntimeError("no free port range")
