"""Log dir failures (Kafka's LogDirFailureChannel, KIP-858 in KRaft).

Every I/O error met on a partition's files (a read, an append, a flush, a roll, a truncation,
recovery, a checkpoint) is reported here with the log dir it happened in. The first report of a
dir marks it offline, once; the handlers (the log manager, then the replica manager and the
broker) run on the event loop, never in the thread that met the error, so a writer or flush
thread never changes the partition map under the loop's feet.

Which errors mean a failed dir: the errnos a disk or file system gives when it cannot do its
job (EIO, ENOSPC, EROFS, EDQUOT, EACCES, ...). ENOENT and EBADF are not among them: they come
from races with krafty's own deletions (a segment deleted by retention while read) and must not
take a healthy dir offline.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import threading
from collections.abc import Callable

from common.errors import ErrorCode, KafkaError

log = logging.getLogger("krafty.log")

STORAGE_ERRNOS = frozenset({errno.EIO, errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EACCES, errno.EPERM,
                            errno.ENXIO, errno.ENODEV, errno.ENOTDIR, errno.EUCLEAN, errno.ESTALE})


def storage_cause(exc: BaseException) -> OSError | None:
    """The OSError that makes ``exc`` a storage failure (itself, or the cause of a
    KAFKA_STORAGE_ERROR), else None."""
    e: BaseException | None = exc
    if isinstance(e, KafkaError):
        if e.code != ErrorCode.KAFKA_STORAGE_ERROR:
            return None
        e = e.__cause__
    if isinstance(e, OSError) and e.errno in STORAGE_ERRNOS:
        return e
    return None


class LogDirFailureChannel:
    """Offline log dirs, each reported once; handlers run on the loop (``bind`` it first) or,
    with no loop bound (start-up, tests), at once in the caller."""

    def __init__(self) -> None:
        self._offline: dict[str, str] = {}  # dir -> why
        self._lock = threading.Lock()
        self._handlers: list[Callable[[str], None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def add_handler(self, fn: Callable[[str], None]) -> None:
        """``fn(dir)`` once for each dir that goes offline, in the order handlers were added."""
        self._handlers.append(fn)

    @property
    def offline_dirs(self) -> dict[str, str]:
        return dict(self._offline)

    def is_offline(self, d: str) -> bool:
        return d in self._offline

    def maybe_add_offline_dir(self, d: str, why: str) -> bool:
        """Mark ``d`` offline (thread-safe); True the first time only."""
        with self._lock:
            if d in self._offline:
                return False
            self._offline[d] = why
        log.error("log dir %s failed: %s. Its partitions go offline; the broker goes on with its other log dirs",
                  d, why)
        loop = self._loop
        if loop is None or loop.is_closed():
            self._run_handlers(d)
            return True
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            loop.call_soon(self._run_handlers, d)  # not in the middle of the operation that failed
        else:
            loop.call_soon_threadsafe(self._run_handlers, d)
        return True

    def _run_handlers(self, d: str) -> None:
        for fn in self._handlers:
            try:
                fn(d)
            except Exception:  # one handler's failure must not keep the others from running
                log.exception("log dir failure handler %r failed for %s", fn, d)
