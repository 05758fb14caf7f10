"""The event-loop stall watchdog names the function that blocked the loop, and stays quiet
while the loop runs."""

import asyncio
import logging
import os
import threading
import time

from common.stallwatch import StallWatch


def _block_the_loop_for(seconds: float) -> None:
    time.sleep(seconds)


async def test_reports_a_blocked_loop_with_the_blocking_frame(caplog):
    w = StallWatch(asyncio.get_running_loop(), threshold_ms=100, interval_ms=20)
    w.start()
    try:
        await asyncio.sleep(0.1)
        with caplog.at_level(logging.WARNING, logger="krafty.stall"):
            _block_the_loop_for(0.4)
            for _ in range(100):  # the report comes when the loop runs again
                if w.stalls:
                    break
                await asyncio.sleep(0.01)
    finally:
        w.stop()
    assert len(w.stalls) == 1
    seconds, stack = w.stalls[0]
    assert 0.3 <= seconds < 2.0
    assert "_block_the_loop_for" in stack
    assert "event loop stalled for" in caplog.text and "_block_the_loop_for" in caplog.text
    if os.access(f"/proc/self/task/{threading.get_native_id()}/stack", os.R_OK):
        kernel = [line for line in stack.splitlines() if line.startswith("  kernel: ")]
        assert kernel and "sleep" in kernel[0], stack  # where the syscall was blocked: clock_nanosleep


async def test_quiet_while_the_loop_runs():
    w = StallWatch(asyncio.get_running_loop(), threshold_ms=200, interval_ms=10)
    w.start()
    try:
        for _ in range(30):
            await asyncio.sleep(0.01)
    finally:
        w.stop()
    assert w.stalls == []


def _slow_syscall_in_a_worker(seconds: float) -> None:
    from common import stallwatch
    sec = stallwatch.enter("test write to /somewhere")
    try:
        time.sleep(seconds)
    finally:
        stallwatch.leave(sec)


async def test_reports_a_slow_call_in_a_worker_thread_with_its_kernel_stack(caplog):
    """Writes moved off the loop cannot stall it, so the watch times them instead."""
    w = StallWatch(asyncio.get_running_loop(), threshold_ms=100, interval_ms=20)
    w.start()
    try:
        with caplog.at_level(logging.WARNING, logger="krafty.stall"):
            await asyncio.to_thread(_slow_syscall_in_a_worker, 0.01)  # quick: not reported
            await asyncio.to_thread(_slow_syscall_in_a_worker, 0.4)
    finally:
        w.stop()
    assert w.stalls == []  # the loop itself kept running
    assert len(w.slow) == 1
    took, what, kernel = w.slow[0]
    assert 0.3 <= took < 2.0 and what == "test write to /somewhere"
    assert "test write to /somewhere took" in caplog.text
    if os.access(f"/proc/self/task/{threading.get_native_id()}/stack", os.R_OK):
        assert "sleep" in kernel, kernel
    from common import stallwatch
    assert stallwatch.enter("after stop") is None  # off again: free
