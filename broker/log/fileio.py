"""The log's file layer: every file operation of the partition logs (segments, indexes,
checkpoints, producer snapshots, the transaction index, the cleaner's copies, directories)
goes through the functions of this module, never ``os`` directly, so that one object decides
what a write, an fsync or a truncation does.

By default they are ``os``'s own (``REAL``: no cost beyond a module attribute lookup). The
simulation (sim/disk.py) installs a layer of its own with ``install``: it keeps the files real
(a read slice's descriptor still goes to ``sendfile``) but remembers what each fsync made
durable, fails a write or an fsync with EIO or ENOSPC on demand, and on a power cut keeps
only what was synced plus a torn, possibly garbled, part of the rest. Checkpoints and
snapshots written whole through Python file objects fsync through ``fsync`` here.

Concurrency: the functions are the syscalls; a layer must be thread-safe as they are (flush and
cleaner threads call them). ``install`` is for set-up, not while logs are in use.
"""

from __future__ import annotations

import os


class Files:
    """The real layer: ``os``'s functions. A replacement implements the same names."""

    open = staticmethod(os.open)
    close = staticmethod(os.close)
    pread = staticmethod(os.pread)
    pwrite = staticmethod(os.pwrite)
    fsync = staticmethod(os.fsync)
    ftruncate = staticmethod(os.ftruncate)
    truncate = staticmethod(os.truncate)
    fstat = staticmethod(os.fstat)
    stat = staticmethod(os.stat)
    unlink = staticmethod(os.unlink)
    replace = staticmethod(os.replace)
    rename = staticmethod(os.rename)
    listdir = staticmethod(os.listdir)
    makedirs = staticmethod(os.makedirs)


NAMES = ("open", "close", "pread", "pwrite", "fsync", "ftruncate", "truncate", "fstat", "stat", "unlink", "replace",
         "rename", "listdir", "makedirs")
REAL = Files()

open = os.open  # noqa: A001 - the layer's names are os's
close = os.close
pread = os.pread
pwrite = os.pwrite
fsync = os.fsync
ftruncate = os.ftruncate
truncate = os.truncate
fstat = os.fstat
stat = os.stat
unlink = os.unlink
replace = os.replace
rename = os.rename
listdir = os.listdir
makedirs = os.makedirs

_current: Files = REAL


def install(layer: Files) -> Files:
    """Route the log's file operations through ``layer``; returns the layer it replaces."""
    global _current
    prev, _current = _current, layer
    g = globals()
    for name in NAMES:
        g[name] = getattr(layer, name)
    return prev


def current() -> Files:
    return _current
