"""The simulated disk of the partition logs: a file layer (broker/log/fileio.py) that the
whole-cluster worlds install while they run.

The files stay real (on tmpfs when there is one: a ``ReadSlice``'s descriptor still goes to
``sendfile``, and a process kill keeps what it wrote, as the page cache does). What the layer
adds is what a disk does that a kill does not show:

- it remembers what each fsync made durable (by inode: a file written, fsynced and renamed
  into place keeps its due), and ``power_loss`` cuts every file of a node back to that plus a
  random part of the rest (the page cache lost with the power, the last write torn); the kept
  unsynced part of a segment (``.log``) may also come back garbled (a sector half written):
  recovery must find the end of the last complete valid batch by its CRC, no less, no more;
- ``fail_next`` makes the next write (pwrite) or fsync under a node's directory fail with EIO
  or ENOSPC; a failed write has written part of its bytes first, as a real short write does.

Concurrency: worlds run every node on one thread (sim/loop.py runs executors inline); the
layer is not shared between threads.
"""

from __future__ import annotations

import errno
import os
import random
import struct
import tempfile

from crc32c import crc32c

from broker.log import fileio

_HEAD = struct.Struct(">qi")  # baseOffset, batchLength: the first 12 bytes of every v2 batch


def scratch_dir(prefix: str) -> str:
    """A new temporary directory for a world's files, on tmpfs when there is one: fsyncs then
    cost nothing and wait for no device (a world models what a disk keeps itself, above)."""
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    return tempfile.mkdtemp(prefix=prefix, dir=shm)


class SimFiles(fileio.Files):
    def __init__(self) -> None:
        self.synced: dict[tuple[int, int], int] = {}
        self.failing: dict[str, tuple[str, int]] = {}  # directory -> (operation, errno) of its next failure
        self.failures = 0
        self._prev: fileio.Files | None = None

    def install(self) -> None:
        if self._prev is None:
            self._prev = fileio.install(self)

    def uninstall(self) -> None:
        if self._prev is not None:
            fileio.install(self._prev)
            self._prev = None

    # -- faults --------------------------------------------------------------------------
    def fail_next(self, directory: str, op: str, code: int = errno.EIO) -> None:
        """The next ``op`` ("write" or "fsync") on a file under ``directory`` fails with ``code``."""
        self.failing[directory.rstrip("/") + "/"] = (op, code)

    def _failure(self, fd: int, op: str) -> int | None:
        if not self.failing:
            return None
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return None
        for d, (what, code) in self.failing.items():
            if what == op and path.startswith(d):
                del self.failing[d]
                self.failures += 1
                return code
        return None

    def power_loss(self, directory: str, rng: random.Random) -> int:
        """Cuts every file under ``directory`` back as a power cut would; returns bytes lost."""
        lost = 0
        for root, _dirs, files in os.walk(directory):
            for name in files:
                path = os.path.join(root, name)
                try:
                    st = os.stat(path)
                except FileNotFoundError:
                    continue
                synced = self.synced.get((st.st_dev, st.st_ino))
                if synced is None:
                    if root == directory:
                        continue  # meta.properties, the bootstrap checkpoint, the lock: not the log's
                    synced = 0
                if st.st_size <= synced:
                    continue
                keep = synced + rng.randint(0, st.st_size - synced)
                os.truncate(path, keep)
                lost += st.st_size - keep
                if name.endswith(".log") and keep > synced and rng.random() < 0.5:
                    n = rng.randint(1, min(64, keep - synced))
                    with open(path, "r+b") as f:
                        f.seek(keep - n)
                        f.write(rng.randbytes(n))
        return lost

    # -- the layer -----------------------------------------------------------------------
    def _note(self, fd: int) -> None:
        st = os.fstat(fd)
        self.synced[(st.st_dev, st.st_ino)] = st.st_size

    def fsync(self, fd: int) -> None:
        code = self._failure(fd, "fsync")
        if code is not None:
            raise OSError(code, os.strerror(code))
        os.fsync(fd)
        self._note(fd)

    def pwrite(self, fd: int, data, pos: int) -> int:
        code = self._failure(fd, "write")
        if code is not None:
            if len(data) > 1:
                os.pwrite(fd, memoryview(data)[:len(data) // 2], pos)
            raise OSError(code, os.strerror(code))
        return os.pwrite(fd, data, pos)


def valid_log_end(partition_dir: str) -> int | None:
    """The log end offset a recovery of ``partition_dir`` must reach, found without the log's
    code: its segments in order, each read batch by batch (length in bounds, magic 2, CRC32C of
    attributes..end) up to the first batch that is not whole and valid; the end of the last
    valid one (or the base offset of a segment with none). A segment that ends torn ends the
    log there: recovery deletes what follows. None: no segment."""
    names = sorted(n for n in os.listdir(partition_dir) if n.endswith(".log") and n[:20].isdigit())
    end = None
    for name in names:
        base = int(name[:20])
        with open(os.path.join(partition_dir, name), "rb") as f:
            data = f.read()
        pos, nxt = 0, base
        while pos + 61 <= len(data):
            off, length = _HEAD.unpack_from(data, pos)
            total = 12 + length
            if length < 49 or pos + total > len(data) or data[pos + 16] != 2:
                break
            if crc32c(data[pos + 21:pos + total]) != struct.unpack_from(">I", data, pos + 17)[0]:
                break
            nxt = off + struct.unpack_from(">i", data, pos + 23)[0] + 1
            pos += total
        end = nxt
        if pos != len(data):
            break
    return end
