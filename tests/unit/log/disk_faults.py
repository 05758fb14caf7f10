"""An injected disk fault for the log's file layer (broker/log/fileio.py): every write and fsync
of a file under a given directory fails with an errno (EIO: a dying disk; ENOSPC: a full one).
Works as root, where chmod 000 does not stop anything."""

from __future__ import annotations

import contextlib
import errno
import os

from broker.log import fileio


def _path_of(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


@contextlib.contextmanager
def failing_dir(monkeypatch, directory: str, err: int = errno.EIO, *, reads: bool = False):
    """Writes and fsyncs (and with ``reads`` preads) of files under ``directory`` raise ``err``
    (``monkeypatch`` is unused: kept so that callers read alike)."""
    root = os.path.realpath(directory) + os.sep
    below = fileio.current()

    class Failing(fileio.Files):
        @staticmethod
        def pwrite(fd, data, pos):
            if _path_of(fd).startswith(root):
                raise OSError(err, os.strerror(err))
            return below.pwrite(fd, data, pos)

        @staticmethod
        def fsync(fd):
            if _path_of(fd).startswith(root):
                raise OSError(err, os.strerror(err))
            return below.fsync(fd)

    if reads:
        def pread(fd, n, pos):
            if _path_of(fd).startswith(root):
                raise OSError(err, os.strerror(err))
            return below.pread(fd, n, pos)
        Failing.pread = staticmethod(pread)
    prev = fileio.install(Failing())
    try:
        yield
    finally:
        fileio.install(prev)
