"""Connection limits that protect the broker from its clients (Kafka's ConnectionQuotas and
the Processor's idle check):

- ``max.connections``: broker-wide; at the limit, listeners stop accepting (new connections
  wait in the kernel backlog) until one closes. The inter-broker listener is exempt: a
  connection it accepts over the limit makes the least recently used client connection close.
- ``max.connections.per.ip`` with ``max.connections.per.ip.overrides`` (``host:count,...``):
  a connection over its address's limit is closed at once.
- ``connections.max.idle.ms``: a connection on which no request started or ended (nor any
  bytes of one arrived) for that long is closed (-1 disables), even with a request in hand,
  as Kafka's Selector expires a connection with no I/O whatever its muted request waits for:
  it is what bounds a long poll (a Fetch's max_wait_ms, up to 24.8 days) on the broker."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket

from common.config import ConfigError

log = logging.getLogger("krafty.limits")


def parse_ip_overrides(raw: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host-or-ip:count,...`` (host names are resolved)."""
    out: dict[str, int] = {}
    for item in (x.strip() for x in raw.split(",")):
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        try:
            n = int(count)
        except ValueError:
            n = -1
        if not sep or not host or n < 0:
            raise ConfigError(f"invalid value {raw!r} for configuration key 'max.connections.per.ip.overrides': "
                              f"{item!r} is not of the form host:count")
        host = host.strip("[]")
        try:
            ip = str(ipaddress.ip_address(host))
        except ValueError:
            try:
                ip = socket.gethostbyname(host)
            except OSError as e:
                raise ConfigError(f"invalid value {raw!r} for configuration key 'max.connections.per.ip.overrides':"
                                  f" cannot resolve {host!r}: {e}") from None
        out[ip] = n
    return out


class ConnectionLimits:
    def __init__(self, max_connections: int, max_per_ip: int, overrides: dict[str, int], idle_ms: int,
                 exempt_listeners: frozenset[str] = frozenset()):
        if max_per_ip == 0 and not overrides:
            raise ConfigError("configuration key 'max.connections.per.ip' is 0, which only makes sense with "
                              "'max.connections.per.ip.overrides' (it would refuse every connection)")
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.overrides = overrides
        self.idle_s = idle_ms / 1000 if idle_ms > 0 else None
        self.exempt = exempt_listeners
        self.total = 0
        self.per_ip: dict[str, int] = {}
        self.conns: set = set()
        self.refused = 0
        self.idle_closed = 0
        self._slot_freed: asyncio.Event | None = None
        self._reaper: asyncio.Task | None = None

    @classmethod
    def from_config(cls, config) -> ConnectionLimits:
        return cls(config["max.connections"], config["max.connections.per.ip"],
                   parse_ip_overrides(config["max.connections.per.ip.overrides"]), config["connections.max.idle.ms"],
                   frozenset({config["inter.broker.listener.name"]}))

    def reconfigure(self, max_connections: int, max_per_ip: int, overrides: dict[str, int]) -> None:
        """New limits (dynamic broker configs): connections over a lowered limit stay open, new
        ones wait or are refused; a raised max.connections lets waiting listeners accept again."""
        if max_per_ip == 0 and not overrides:
            raise ConfigError("'max.connections.per.ip' 0 would refuse every connection")
        self.max_connections, self.max_per_ip, self.overrides = max_connections, max_per_ip, overrides
        if self._slot_freed is not None:
            self._slot_freed.set()

    def limit_for(self, ip: str) -> int:
        return self.overrides.get(ip, self.max_per_ip)

    async def wait_for_slot(self, listener: str) -> None:
        """Blocks a listener's accept loop while the broker is at max.connections."""
        if listener in self.exempt:
            return
        while self.total >= self.max_connections:
            if self._slot_freed is None:
                self._slot_freed = asyncio.Event()
            self._slot_freed.clear()
            await self._slot_freed.wait()

    def admit(self, ip: str) -> bool:
        """Counts a new connection from ``ip``; False (and not counted) when over its limit."""
        n = self.per_ip.get(ip, 0)
        if n >= self.limit_for(ip):
            self.refused += 1
            log.info("refusing a connection from %s: it already has %d (max.connections.per.ip)", ip, n)
            return False
        self.per_ip[ip] = n + 1
        self.total += 1
        return True

    def opened(self, conn) -> None:
        self.conns.add(conn)
        if self.idle_s is not None and self._reaper is None:
            self._reaper = asyncio.get_running_loop().create_task(self._reap_idle())
        if self.total > self.max_connections:
            self._close_least_recently_used()

    def _close_least_recently_used(self) -> None:
        """Over max.connections because the exempt inter-broker listener accepted one more: the
        least recently used connection of another listener is closed (Kafka's Processor
        closeExcessConnections), idle ones first."""
        others = [c for c in self.conns if getattr(getattr(c, "server", None), "listener_name", None) not in self.exempt]
        if not others:
            return
        # loop.time() has millisecond resolution under uvloop: ties go to the older connection
        victim = min(others, key=lambda c: (getattr(c, "in_request", False), getattr(c, "active_at", 0.0),
                                            getattr(c, "cid", 0)))
        log.info("closing connection %s: over max.connections (%d) after an inter-broker connection",
                 victim.addr, self.max_connections)
        self.conns.discard(victim)
        victim.shutdown()  # its reader sees EOF and closes it

    def closed(self, conn, ip: str) -> None:
        self.conns.discard(conn)
        n = self.per_ip.get(ip, 0) - 1
        if n > 0:
            self.per_ip[ip] = n
        else:
            self.per_ip.pop(ip, None)
        self.total -= 1
        if self._slot_freed is not None:
            self._slot_freed.set()

    async def _reap_idle(self) -> None:
        loop = asyncio.get_running_loop()
        period = max(0.05, min(self.idle_s / 4, 10.0))
        while True:
            await asyncio.sleep(period)
            now = loop.time()
            for c in list(self.conns):
                if now - c.active_at > self.idle_s:
                    self.idle_closed += 1
                    c.active_at = now  # once
                    log.debug("closing connection %s idle for more than connections.max.idle.ms%s", c.addr,
                              " (a request in hand)" if c.in_request else "")
                    c.shutdown()  # its reader sees EOF and closes it; a parked request is cancelled

    def close(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None
