"""An injected disk fault for the log's file layer: every write and fsync of a file under a
given directory fails with an errno (EIO: a dying disk; ENOSPC: a full one). Works as root,
where chmod 000 does not stop anything."""

from __future__ import annotations

import contextlib
import errno
import os

from broker.log import segment


def _path_of(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


@contextlib.contextmanager
def failing_dir(monkeypatch, directory: str, err: int = errno.EIO):
    """Writes (``segment._write_all``) and fsyncs of files under ``directory`` raise ``err``."""
    root = os.path.realpath(directory) + os.sep
    write_all, fsync = segment._write_all, os.fsync

    def bad(fd: int) -> bool:
        return _path_of(fd).startswith(root)

    def failing_write(fd, data, pos):
        if bad(fd):
            raise OSError(err, os.strerror(err))
        return write_all(fd, data, pos)

    def failing_fsync(fd):
        if bad(fd):
            raise OSError(err, os.strerror(err))
        return fsync(fd)

    with monkeypatch.context() as m:
        m.setattr(segment, "_write_all", failing_write)
        m.setattr(os, "fsync", failing_fsync)
        yield
