"""A simulated disk of named files, with the faults a real one has (issue 18).

Each file has two copies: what the process reads and writes (the page cache) and what is on
the medium. ``fsync`` makes the medium equal to the page cache. Faults:

- ``power_cut()``: the page cache is gone; every file becomes what the medium holds.
  ``torn_bytes`` also takes that many bytes off the end of the file written last, fsynced or
  not: a drive whose volatile write cache acknowledged writes it had not made (the page cache
  "lost with power after a clean stop"), so a tail can be torn even after a clean shutdown.
- ``corrupt(name, pos, data)``: bytes of the medium (and of the page cache over it) are
  overwritten: a bad block, a flipped bit, an overwritten batch length.

The interface is the few calls a log segment makes (``pwrite``, ``pread``, ``truncate``,
``fsync``, ``size``, create/remove/list), so a log written against it can run on a real file
system or on this one; sim/replication/simlog.py is the first user.
"""

from __future__ import annotations


class SimFile:
    __slots__ = ("data", "durable", "damaged")

    def __init__(self) -> None:
        self.data = bytearray()  # the page cache: what reads see
        self.durable = bytearray()  # the medium: what a power cut leaves
        self.damaged = False  # corrupt() touched it (lets readers skip checks on files never damaged)

    @property
    def size(self) -> int:
        return len(self.data)

    def pwrite(self, data: bytes, pos: int) -> None:
        if pos > len(self.data):
            self.data.extend(bytes(pos - len(self.data)))
        self.data[pos:pos + len(data)] = data

    def pread(self, n: int, pos: int) -> bytes:
        return bytes(self.data[pos:pos + n])

    def truncate(self, size: int) -> None:
        del self.data[size:]

    def fsync(self) -> None:
        if self.durable != self.data:
            self.durable = bytearray(self.data)

    @property
    def synced(self) -> bool:
        return self.durable == self.data


class SimDisk:
    def __init__(self) -> None:
        self.files: dict[str, SimFile] = {}
        self.last_written: str | None = None

    def open(self, name: str) -> SimFile:
        """The file ``name``, created empty if missing (creation and removal are durable at
        once: directory operations are not what is modelled here)."""
        f = self.files.get(name)
        if f is None:
            f = self.files[name] = SimFile()
        return f

    def exists(self, name: str) -> bool:
        return name in self.files

    def remove(self, name: str) -> None:
        self.files.pop(name, None)

    def names(self, prefix: str = "") -> list[str]:
        return sorted(n for n in self.files if n.startswith(prefix))

    def write(self, name: str, data: bytes, pos: int) -> None:
        self.open(name).pwrite(data, pos)
        self.last_written = name

    def fsync_all(self) -> None:
        for f in self.files.values():
            f.fsync()

    def power_cut(self, torn_bytes: int = 0) -> None:
        """Lose the page cache; with ``torn_bytes`` the drive also loses the end of the file
        written last, whatever was fsynced."""
        if torn_bytes and self.last_written in self.files:
            f = self.files[self.last_written]
            del f.durable[max(len(f.durable) - torn_bytes, 0):]
        for f in self.files.values():
            f.data = bytearray(f.durable)

    def corrupt(self, name: str, pos: int, data: bytes) -> None:
        """Overwrite bytes on the medium and in the page cache (a bad block)."""
        f = self.files[name]
        for buf in (f.durable, f.data):
            end = min(pos + len(data), len(buf))
            if pos < end:
                buf[pos:end] = data[:end - pos]
        f.damaged = True
