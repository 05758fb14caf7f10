"""The memory of the requests a broker is reading or handling: Kafka's
``queued.max.request.bytes`` and the SocketServer's memory pool.

Every request frame reserves its declared size here before its body is read and gives it back
once the request has been handled (or its connection has closed). A frame that does not fit in
what is left makes its connection stop reading (TCP back-pressure on that client) until enough
is released; nothing fails. Waiting frames are served first fit, in arrival order, so small
requests keep flowing while a large one waits for room.

Kafka's default is unbounded (-1) and its pool may overshoot by one request; krafty's default
is a bound (256 MiB) and a frame is admitted only when it fits, so announced sizes can never
add up to more memory than the bound, whatever clients send."""

from __future__ import annotations

import asyncio

from common.config import ConfigError


class RequestMemoryPool:
    def __init__(self, limit: int):
        """``limit`` in bytes; <= 0 means unbounded (Kafka's -1)."""
        self.limit = limit if limit > 0 else None
        self.available = self.limit or 0
        self._waiters: list[tuple[int, asyncio.Future]] = []

    @classmethod
    def from_config(cls, config) -> RequestMemoryPool:
        limit, largest = config["queued.max.request.bytes"], config["socket.request.max.bytes"]
        if 0 < limit < largest:  # as Kafka: a request of the largest size must fit
            raise ConfigError(f"configuration key 'queued.max.request.bytes' ({limit}) must be at least "
                              f"'socket.request.max.bytes' ({largest}), or -1 for no bound")
        return cls(limit)

    @property
    def used(self) -> int:
        return 0 if self.limit is None else self.limit - self.available

    @property
    def waiting(self) -> int:
        """Frames waiting for room (their connections are not being read)."""
        return len(self._waiters)

    def try_reserve(self, size: int) -> int | None:
        """Reserves room for a frame of ``size`` bytes if it fits now; returns the bytes reserved
        (to give back with ``release``), None when it must wait."""
        if self.limit is None:
            return 0
        size = min(size, self.limit)  # a frame larger than the pool waits until the pool is empty
        if size <= self.available:
            self.available -= size
            return size
        return None

    async def reserve(self, size: int) -> int:
        """Reserves room for a frame of ``size`` bytes, waiting until it fits."""
        got = self.try_reserve(size)
        if got is not None:
            return got
        size = min(size, self.limit)
        waiter = (size, asyncio.get_running_loop().create_future())
        self._waiters.append(waiter)
        try:
            await waiter[1]
        except asyncio.CancelledError:
            if waiter[1].done() and not waiter[1].cancelled():
                self.release(size)  # granted just as the connection went away
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            raise
        return size

    def release(self, reserved: int) -> None:
        if self.limit is None or reserved == 0:
            return
        self.available += reserved
        if not self._waiters:
            return
        still = []
        for size, fut in self._waiters:
            if fut.done():
                continue
            if size <= self.available:
                self.available -= size
                fut.set_result(None)
            else:
                still.append((size, fut))
        self._waiters = still
