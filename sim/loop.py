"""A deterministic asyncio event loop in virtual time: runs krafty's real coroutines.

``SimLoop`` is an ``asyncio.BaseEventLoop`` whose selector never waits: when nothing is
ready it jumps virtual time to the next timer. So ``asyncio.sleep``, ``loop.call_later``,
``asyncio.timeout`` and ``loop.time()`` all run in virtual time, and a run is a function of
its seed alone:

- ready callbacks are run in an order drawn from the seed (``reorder=True``): independent
  tasks interleave differently from seed to seed, the same way on every replay;
- ``run_in_executor`` runs the function inline, at once (no threads: a thread's timing would
  make a run unrepeatable);
- each callback runs in the context it was scheduled from; ``NODE`` (a context variable)
  names the simulated process that owns it. ``kill(node)`` drops every later callback of that
  process (its tasks never run again, as after ``kill -9``): nothing of it runs after its
  death, and nothing of another process is touched.

A coroutine that waits for something nothing will ever do (no timer, nothing ready) is a
deadlock in simulation: ``run_until`` raises ``SimDeadlock`` instead of hanging; so are
coroutines that keep waking each other without virtual time passing (a livelock).
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import random
import weakref
from collections.abc import Callable

# the simulated process a callback belongs to (None: the world itself)
NODE: contextvars.ContextVar[object | None] = contextvars.ContextVar("sim_node", default=None)


class SimDeadlock(RuntimeError):
    pass


# A seed runs ~20,000 callbacks in all; this many at one virtual instant is a livelock (which
# in real time would be a busy loop), not work
LIVELOCK_CALLBACKS = 200_000


class _VirtualSelector:
    """Never blocks: advances the loop's virtual clock by the timeout it is asked to wait."""

    def __init__(self, loop: SimLoop):
        self.loop = loop

    def select(self, timeout: float | None = None) -> list:
        if timeout is None:
            raise SimDeadlock("nothing is ready and no timer is set: every coroutine waits forever")
        if timeout > 0:
            self.loop._now += timeout
        return []

    def close(self) -> None:
        pass

    def get_map(self) -> dict:
        return {}


class _SimHandle(asyncio.Handle):
    """A callback: run by ``SimLoop._run_once`` itself (``_run`` only for asyncio's own use)."""

    __slots__ = ()


class _SimTimerHandle(asyncio.TimerHandle):
    __slots__ = ()


_new_handle = object.__new__
_copy_context = contextvars.copy_context


class SimLoop(asyncio.BaseEventLoop):
    def __init__(self, seed: int = 0, *, start: float = 1000.0, reorder: bool = True):
        super().__init__()
        self._selector = _VirtualSelector(self)
        self._now = start
        self._clock_resolution = 1e-9
        self._timers: list[tuple[float, int, asyncio.TimerHandle]] = []  # heap; asyncio's _scheduled stays empty
        self._seq = 0
        self._instant, self._at_instant = start, 0  # callbacks run since virtual time last moved
        self.rng = random.Random(f"loop-{seed}")
        self.reorder = reorder
        self.dead: set[object] = set()  # processes killed: their callbacks are dropped
        self._owner_of: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # task -> its process
        self.graveyard: list[list] = []  # the pending tasks of killed processes
        self.paused: dict[object, list] = {}  # process -> its handles that came up while it was paused
        self.steps = 0  # callbacks run (a measure of work)
        self.on_step: Callable[[], None] | None = None  # called after every batch of callbacks (invariants)
        self.ran: set[object] = set()  # with on_step: the processes whose callbacks ran (it empties it)
        self.set_exception_handler(self._exception)
        self.errors: list[dict] = []

    # -- virtual time ------------------------------------------------------------------
    def time(self) -> float:
        return self._now

    def _process_events(self, event_list) -> None:
        pass

    def _write_to_self(self) -> None:
        pass

    def _run_once(self) -> None:
        """asyncio's ``_run_once`` without what a virtual clock does not need (selector, I/O
        events, debug timing): cancelled timers dropped from the head, time jumped to the next
        timer when nothing is ready, due timers made ready after the ready callbacks were put in
        their seeded order, then each run once. Timers are (when, sequence, handle) tuples: the
        heap compares them in C, and equal deadlines fire in the order they were set."""
        ready = self._ready
        timers = self._timers
        while timers and timers[0][2]._cancelled:
            heapq.heappop(timers)[2]._scheduled = False
            self._timer_cancelled_count -= 1
        if not ready:
            if not timers:
                raise SimDeadlock("nothing is ready and no timer is set: every coroutine waits forever")
            if timers[0][0] > self._now:
                self._now = timers[0][0]
        if self._now != self._instant:
            self._instant, self._at_instant = self._now, 0
        elif self._at_instant > LIVELOCK_CALLBACKS:
            raise SimDeadlock(f"livelock: {self._at_instant} callbacks ran at virtual time {self._now:.6f} without "
                              f"time passing (coroutines waking each other forever)")
        elif self.reorder and len(ready) > 1:
            items = list(ready)
            self.rng.shuffle(items)
            ready.clear()
            ready.extend(items)
        end = self._now + self._clock_resolution
        while timers and timers[0][0] < end:
            h = heapq.heappop(timers)[2]
            h._scheduled = False
            ready.append(h)
        n = len(ready)
        popleft = ready.popleft
        paused = self.paused
        ran = self.ran if self.on_step is not None else None
        for _ in range(n):
            h = popleft()
            if h._cancelled:
                continue
            ctx = h._context
            if paused or ran is not None:
                owner = ctx.get(NODE)
                if paused:
                    held = paused.get(owner)
                    if held is not None:  # its process is stopped: it waits for the resume
                        held.append(h)
                        continue
                if ran is not None:
                    ran.add(owner)
            try:
                ctx.run(h._callback, *h._args)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:  # noqa: BLE001 - as asyncio.Handle._run: to the exception handler
                self.call_exception_handler({"message": f"Exception in callback {h._callback!r}", "exception": exc,
                                             "handle": h})
        self.steps += n
        self._at_instant += n
        if self.on_step is not None:
            self.on_step()

    def _timer_handle_cancelled(self, handle) -> None:
        if handle._scheduled:
            self._timer_cancelled_count += 1
            if self._timer_cancelled_count > 256 and self._timer_cancelled_count * 2 > len(self._timers):
                self._drop_cancelled_timers()

    def _drop_cancelled_timers(self) -> None:
        keep = []
        for entry in self._timers:
            if entry[2]._cancelled:
                entry[2]._scheduled = False
            else:
                keep.append(entry)
        heapq.heapify(keep)
        self._timers = keep
        self._timer_cancelled_count = 0

    def next_timer(self) -> float | None:
        """When the next live timer fires (None: no timer)."""
        timers = self._timers
        while timers and timers[0][2]._cancelled:
            heapq.heappop(timers)[2]._scheduled = False
            self._timer_cancelled_count -= 1
        return timers[0][0] if timers else None

    # -- callbacks owned by simulated processes ----------------------------------------
    # A callback runs in the context it was scheduled with; NODE in that context names the
    # process. Killing a process cancels what it has scheduled; anything scheduled for it
    # later (a task of it woken by another process's future) is born cancelled.
    def _handle(self, cls, callback, args, context):
        """asyncio's Handle.__init__ without debug mode; born cancelled for a dead process."""
        if self._closed:
            raise RuntimeError("Event loop is closed")
        h = _new_handle(cls)
        if context is None:
            context = _copy_context()
        h._context = context
        h._loop = self
        h._repr = h._source_traceback = None
        if self.dead and context.get(NODE) in self.dead:
            h._cancelled = True
            h._callback = h._args = None
        else:
            h._cancelled = False
            h._callback = callback
            h._args = args
        return h

    def call_soon(self, callback, *args, context=None):
        h = self._handle(_SimHandle, callback, args, context)
        if not h._cancelled:
            self._ready.append(h)
        return h

    def _call_soon(self, callback, args, context):
        return self.call_soon(callback, *args, context=context)

    def call_later(self, delay, callback, *args, context=None):
        return self.call_at(self._now + delay, callback, *args, context=context)

    def call_at(self, when, callback, *args, context=None):
        timer = self._handle(_SimTimerHandle, callback, args, context)
        timer._when = when
        timer._scheduled = False
        if not timer._cancelled:
            self._seq += 1
            heapq.heappush(self._timers, (when, self._seq, timer))
            timer._scheduled = True
        return timer

    def pause(self, owner: object) -> None:
        """SIGSTOP: nothing of ``owner`` runs until ``resume`` (its callbacks wait, the same
        handles, so cancelling them still works); a deadline that passes meanwhile fires at
        once on resume, as after a real pause."""
        if owner not in self.dead:
            self.paused.setdefault(owner, [])

    def resume(self, owner: object) -> None:
        for h in self.paused.pop(owner, []):
            if not h._cancelled and owner not in self.dead:
                self._ready.append(h)

    def call_soon_threadsafe(self, callback, *args, context=None):
        return self.call_soon(callback, *args, context=context)

    def create_task(self, coro, *, name=None, context=None):
        owner = context.get(NODE) if context is not None else NODE.get()
        task = super().create_task(coro, name=name, context=context)
        if owner is not None:
            self._owner_of[task] = owner
        return task

    def kill(self, owner: object) -> None:
        """Nothing ``owner`` scheduled, or will be scheduled for it, runs. Its tasks are kept
        (never collected: a collected coroutine would run its ``finally`` blocks, which a
        killed process never does)."""
        self.dead.add(owner)
        for h in [*self._ready, *(entry[2] for entry in self._timers)]:
            ctx = h._context
            if ctx is not None and ctx.get(NODE) == owner:
                h.cancel()
        self.graveyard.append([t for t, o in list(self._owner_of.items()) if o == owner and not t.done()])

    # -- no threads ------------------------------------------------------------------------
    def run_in_executor(self, executor, func, *args):
        fut = self.create_future()
        try:
            fut.set_result(func(*args))
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting coroutine
            fut.set_exception(e)
        return fut

    # -- sockets: the simulated network (sim/net.py) ---------------------------------------
    net = None  # a sim.net.SimNet once one is made for this loop

    async def sock_accept(self, sock):
        return await sock.accept()

    async def sock_recv(self, sock, n: int) -> bytes:
        while True:
            try:
                return sock.recv(n)
            except BlockingIOError:
                await sock.wait_readable()

    async def sock_recv_into(self, sock, buf) -> int:
        while True:
            try:
                return sock.recv_into(buf, len(buf))
            except BlockingIOError:
                await sock.wait_readable()

    async def sock_sendall(self, sock, data) -> None:
        sock.send(data)

    def _sim_socket(self, fd: int):
        s = self.net.streams.get(fd)
        if s is None or s.closed:
            raise ValueError(f"no simulated socket has fd {fd}")
        return s

    def add_reader(self, fd, callback, *args) -> None:
        s = self._sim_socket(fd)
        s.on_readable = (lambda: callback(*args)) if args else callback
        if s.readable():
            self.call_soon(s.on_readable)

    def remove_reader(self, fd) -> bool:
        try:
            s = self._sim_socket(fd)
        except ValueError:
            return False
        s.on_readable = None
        return True

    def add_writer(self, fd, callback, *args) -> None:
        self.call_soon(callback, *args)  # a simulated socket is always writable

    def remove_writer(self, fd) -> bool:
        return True

    async def create_connection(self, protocol_factory, host=None, port=None, *, ssl=None, server_hostname=None,
                                **kw):
        from sim.net import SimTransport, connect

        if ssl:
            raise NotImplementedError("TLS is not simulated")
        sock = await connect(self.net, host, port)
        protocol = protocol_factory()
        transport = SimTransport(self, sock, protocol)
        protocol.connection_made(transport)
        return transport, protocol

    # -- errors ------------------------------------------------------------------------
    def _exception(self, loop, context: dict) -> None:
        # a task of a killed process is collected pending: that is its death, not an error
        msg = context.get("message", "")
        if "Task was destroyed but it is pending" in msg:
            return
        self.errors.append(context)

    # -- driving -----------------------------------------------------------------------
    def run_until(self, t: float, stop: Callable[[], bool] | None = None) -> bool:
        """Runs until virtual time ``t`` or until ``stop()`` holds (checked after every step);
        returns whether ``stop`` held."""
        if self._stopping:
            self._stopping = False
        asyncio.events._set_running_loop(self)
        self._thread_id = None
        try:
            while True:
                if stop is not None and stop():
                    return True
                nxt = self.next_timer()
                if not self._ready and (nxt is None or nxt > t):
                    if nxt is None and t == float("inf"):
                        raise SimDeadlock("nothing is ready and no timer is set")
                    self._now = max(self._now, t) if t != float("inf") else self._now
                    return stop() if stop is not None else False
                self._run_once()
        finally:
            asyncio.events._set_running_loop(None)

    def finish(self) -> None:
        """Closes the loop once its world is done: the coroutines of dead processes are finished
        first, while it is open (collected later, their finally blocks would schedule callbacks
        on a closed loop)."""
        for t in asyncio.all_tasks(self):
            try:
                t.get_coro().close()
            except BaseException:  # noqa: BLE001, S110 - a dead process's last words
                pass
        self.graveyard.clear()
        self.close()

    def run_task(self, coro, timeout: float = 3600.0):
        """Runs ``coro`` to completion (in virtual time, at most ``timeout`` s) and returns its result."""
        task = self.create_task(coro)
        if not self.run_until(self._now + timeout, task.done):
            task.cancel()
            raise TimeoutError(f"{coro!r} did not finish within {timeout} virtual s")
        return task.result()

