"""Event-loop stall watchdog: a thread that notices when the loop stops running callbacks
and logs where it is stuck.

Every ``interval`` the thread schedules a no-op on the loop (``call_soon_threadsafe``) and
waits for it to run. When it has not run after ``threshold`` the thread takes the loop
thread's current stack (``sys._current_frames``) and, on Linux, its kernel stack (where a
syscall is blocked: dirty-page throttling, a journal, reclaim), and when the loop comes back it
logs one warning with the stall's length and those stacks. A stall of the loop delays every request,
heartbeat and replica fetch of the process, so this is the first thing to look at when
latency has outliers. Off by default (``krafty.loop.stall.warn.ms=0``).

Work that left the loop for a thread so it cannot stall it (the log writer threads' write
syscalls) is watched too: such a thread wraps the call in ``enter``/``leave``; one that takes
longer than the threshold is logged with its kernel stack, sampled while it was stuck.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import traceback

from common.clock import SYSTEM

log = logging.getLogger("krafty.stall")

_active: StallWatch | None = None  # the running watch, if any: enter() is free when off


class _Section:
    __slots__ = ("what", "args", "t0", "stack_path", "kernel")

    def __init__(self, what: str, args: tuple):
        self.what = what
        self.args = args
        self.t0 = SYSTEM.monotonic()
        self.stack_path = f"/proc/self/task/{threading.get_native_id()}/stack"
        self.kernel = ""


def enter(what: str, *args) -> _Section | None:
    """A thread starts a call that may block (``what % args`` names it, formatted only if it
    is reported); pass the result to ``leave``. Returns None (and costs nothing more) while no
    watch runs."""
    w = _active
    if w is None:
        return None
    sec = _Section(what, args)
    w._sections.add(sec)
    return sec


def leave(sec: _Section | None) -> None:
    w = _active
    if sec is None or w is None:
        return
    w._sections.discard(sec)
    took = SYSTEM.monotonic() - sec.t0
    if took >= w._threshold:
        what = sec.what % sec.args if sec.args else sec.what
        w.slow = [*w.slow[-9:], (took, what, sec.kernel)]
        log.warning("%s took %.0f ms%s", what, took * 1000,
                    f"; {w._threshold * 1000:.0f} ms in, its thread was at:\n{sec.kernel.rstrip()}"
                    if sec.kernel else "")


class StallWatch:
    def __init__(self, loop: asyncio.AbstractEventLoop, threshold_ms: int, interval_ms: int | None = None):
        self._loop = loop
        self._threshold = threshold_ms / 1000
        self._interval = (interval_ms if interval_ms is not None else max(10, threshold_ms // 2)) / 1000
        self._loop_thread = threading.get_ident()  # constructed on the loop's thread
        self._kernel_stack_path = f"/proc/self/task/{threading.get_native_id()}/stack"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="krafty-stallwatch", daemon=True)
        self.stalls: list[tuple[float, str]] = []  # (seconds, stack), the last few, for tests and tools
        self.slow: list[tuple[float, str, str]] = []  # watched sections: (seconds, what, kernel stack)
        self._sections: set[_Section] = set()

    def start(self) -> None:
        global _active
        _active = self
        self._thread.start()

    def stop(self) -> None:
        global _active
        if _active is self:
            _active = None
        self._stop.set()
        self._thread.join(timeout=5)

    def _sample_sections(self) -> None:
        now = SYSTEM.monotonic()
        for sec in list(self._sections):
            if not sec.kernel and now - sec.t0 >= self._threshold:
                sec.kernel = _read_kernel_stack(sec.stack_path) or "  kernel: (not readable)\n"

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._sample_sections()
            ran = threading.Event()
            t0 = SYSTEM.monotonic()
            try:
                self._loop.call_soon_threadsafe(ran.set)
            except RuntimeError:  # loop closed
                return
            if ran.wait(self._threshold):
                continue
            frame = sys._current_frames().get(self._loop_thread)
            stack = "".join(traceback.format_stack(frame)) if frame is not None else "(no frame)\n"
            stack += self._kernel_stack()
            while not ran.wait(min(self._interval, 1.0)):
                self._sample_sections()
                if self._stop.is_set():
                    return
            stalled = SYSTEM.monotonic() - t0
            self.stalls = [*self.stalls[-9:], (stalled, stack)]
            log.warning("event loop stalled for %.0f ms; %.0f ms in, the loop thread was at:\n%s",
                        stalled * 1000, self._threshold * 1000, stack.rstrip())

    def _kernel_stack(self) -> str:
        return _read_kernel_stack(self._kernel_stack_path)


def _read_kernel_stack(path: str) -> str:
    try:
        with open(path) as f:
            frames = [line.split("] ", 1)[-1].strip() for line in f if line.strip()]
    except OSError:  # not Linux, or not allowed to read it
        return ""
    return f"  kernel: {' <- '.join(frames)}\n" if frames else ""
