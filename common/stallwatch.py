"""Event-loop stall watchdog: a thread that notices when the loop stops running callbacks
and logs where it is stuck.

Every ``interval`` the thread schedules a no-op on the loop (``call_soon_threadsafe``) and
waits for it to run. When it has not run after ``threshold`` the thread takes the loop
thread's current stack (``sys._current_frames``) and, on Linux, its kernel stack (where a
syscall is blocked: dirty-page throttling, a journal, reclaim), and when the loop comes back it
logs one warning with the stall's length and those stacks. A stall of the loop delays every request,
heartbeat and replica fetch of the process, so this is the first thing to look at when
latency has outliers. Off by default (``krafty.loop.stall.warn.ms=0``).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback

log = logging.getLogger("krafty.stall")


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

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            ran = threading.Event()
            t0 = time.monotonic()
            try:
                self._loop.call_soon_threadsafe(ran.set)
            except RuntimeError:  # loop closed
                return
            if ran.wait(self._threshold):
                continue
            frame = sys._current_frames().get(self._loop_thread)
            stack = "".join(traceback.format_stack(frame)) if frame is not None else "(no frame)\n"
            stack += self._kernel_stack()
            while not ran.wait(1.0):
                if self._stop.is_set():
                    return
            stalled = time.monotonic() - t0
            self.stalls = [*self.stalls[-9:], (stalled, stack)]
            log.warning("event loop stalled for %.0f ms; %.0f ms in, the loop thread was at:\n%s",
                        stalled * 1000, self._threshold * 1000, stack.rstrip())

    def _kernel_stack(self) -> str:
        try:
            with open(self._kernel_stack_path) as f:
                frames = [line.split("] ", 1)[-1].strip() for line in f if line.strip()]
        except OSError:  # not Linux, or not allowed to read it
            return ""
        return f"  kernel: {' <- '.join(frames)}\n" if frames else ""
