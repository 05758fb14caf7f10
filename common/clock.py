"""The one place krafty reads time and draws randomness.

DESIGN.md's two clocks: liveness, timeouts and sessions use ``monotonic`` (never steps, never
goes back); record timestamps, retention and anything a user reads as a date use ``wall_ms``
(may step either way with NTP or an operator). A wall-clock step must never fence a broker or
expel a group member, so nothing that decides liveness reads ``wall_ms``.

Shells (drivers, loops, coordinators, servers, the log's file layer) take a ``Clock`` when
they are built, defaulting to ``SYSTEM``; the simulator passes a virtual one, so the same
production code runs in simulated time and replays exactly from a seed. Waiting is done
through the event loop (``asyncio.sleep``, ``loop.call_later``), which the simulator's loop
also runs in virtual time. Pure cores take ``now`` as an argument and import nothing from here.

Outside this module no krafty code calls ``time.time()``, ``time.monotonic()``, the global
``random`` functions or ``uuid.uuid4()``.
"""

from __future__ import annotations

import asyncio
import random
import secrets
import time
import uuid
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds from an arbitrary origin; for deadlines, timeouts and liveness."""
        ...

    def monotonic_ms(self) -> int:
        ...

    def wall_ms(self) -> int:
        """Milliseconds since the Unix epoch; for timestamps users read. May step."""
        ...

    @property
    def rng(self) -> random.Random:
        """This node's source of randomness (seeded in simulation)."""
        ...

    def uuid4(self) -> uuid.UUID:
        ...

    def secret_bytes(self, n: int) -> bytes:
        """Bytes for secrets (salts, seeds): from the OS's CSPRNG on a real node, from ``rng``
        in simulation (where replaying a seed matters more than secrecy)."""
        ...


class SystemClock:
    """The real clocks of the machine."""

    __slots__ = ("rng",)

    def __init__(self, rng: random.Random | None = None):
        self.rng = rng or random.Random()

    def monotonic(self) -> float:
        return time.monotonic()

    def monotonic_ms(self) -> int:
        return int(time.monotonic() * 1000)

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def uuid4(self) -> uuid.UUID:
        return uuid.uuid4()

    def secret_bytes(self, n: int) -> bytes:
        return secrets.token_bytes(n)


class ManualClock:
    """A clock that moves only when told: for unit tests of shells and for the simulator.

    ``wall_offset_ms`` is the wall clock's distance from the monotonic one, so a test can step
    the wall clock (``step_wall``) without moving monotonic time, as NTP does."""

    __slots__ = ("_now", "wall_offset_ms", "rng")

    def __init__(self, start: float = 1000.0, wall_ms: int = 1_700_000_000_000, seed: int = 0):
        self._now = start
        self.wall_offset_ms = wall_ms - int(start * 1000)
        self.rng = random.Random(seed)

    def monotonic(self) -> float:
        return self._now

    def monotonic_ms(self) -> int:
        return int(self._now * 1000)

    def wall_ms(self) -> int:
        return int(self._now * 1000) + self.wall_offset_ms

    def uuid4(self) -> uuid.UUID:
        return uuid.UUID(int=self.rng.getrandbits(128), version=4)

    def secret_bytes(self, n: int) -> bytes:
        return self.rng.randbytes(n)

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("monotonic time never goes back")
        self._now += seconds

    def step_wall(self, ms: int) -> None:
        """An NTP or operator step of the wall clock (either direction)."""
        self.wall_offset_ms += ms


SYSTEM: Clock = SystemClock()


async def wait_event(event: asyncio.Event, timeout_s: float) -> bool:
    """``event.wait()`` for at most ``timeout_s`` seconds of the loop's time; whether the event
    is set. (``asyncio.wait_for`` would make a task per wait: the idle rounds of fetchers, the
    heartbeat and the coordinators' timers wait this way several times a second.)"""
    if event.is_set():
        return True
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        return False
    return True
