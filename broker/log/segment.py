"""One log segment: ``<base>.log`` plus its ``.index``, ``.timeindex`` and (once a
transaction is aborted in it) ``.txnindex``.

Files are named by the 20-digit zero-padded base offset, like Kafka. The log file is
written with ``pwrite`` at the known end and read with ``pread``/``sendfile``. The
descriptor is held by a ``SegmentFile``, closed when nothing holds it: a ``ReadSlice``
holds it, and a deleted segment's file is also kept for FILE_DELETE_DELAY_S (Kafka's
file.delete.delay.ms), so a fetch still sending from it by fd number stays safe.
"""

from __future__ import annotations

import collections
import ctypes
import errno
import heapq
import itertools
import logging
import os
import threading
import weakref
from collections.abc import Iterator

from crc32c import crc32c

from common.clock import SYSTEM
from common.errors import ErrorCode, KafkaError

from . import fileio as fio
from .batch import (
    ATTRIBUTES_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    BatchHeader,
    unpack_header,
)
from .index import CorruptIndexError, OffsetIndex, TimeIndex, _write_all
from .txn_index import CorruptTxnIndexError, TransactionIndex

log = logging.getLogger("krafty.log")

LOG_SUFFIX = ".log"
INDEX_SUFFIX = OffsetIndex.SUFFIX
TIMEINDEX_SUFFIX = TimeIndex.SUFFIX
_SCAN_CHUNK = 16 * 1024
_RECOVER_CHUNK = 1 << 20
_RECENT_ENDS = 1024  # batch ends remembered for fast high-watermark positioning
READ_CRC_MAX_BYTES = 64 * 1024  # a read CRC-checks its first batch up to this size (check_read_start)
INT32_MAX = 2**31 - 1
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_SYNC_FILE_RANGE_WRITE = 2


def _load_sync_file_range():
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range  # CDLL calls release the GIL
    except (AttributeError, OSError):
        return None  # not Linux: leave writeback to the kernel
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_sync_file_range = _load_sync_file_range()


def write_at(file: SegmentFile, data: memoryview, pos: int) -> None:
    """Write all of ``data`` at ``pos``; on failure cut the file back to ``pos`` (a partial
    write must not be left for recovery to find) and raise. Thread-safe: pwrite only."""
    try:
        _write_all(file.fd, data, pos)
    except OSError:
        try:
            fio.ftruncate(file.fd, pos)
        except OSError:
            pass
        raise


def _pread(seg: LogSegment, n: int, pos: int) -> bytes:
    f = seg.file  # held through the read: an eviction by another thread closes nothing under it
    return fio.pread(f.fd, n, pos)


class SegmentDeletedError(FileNotFoundError):
    """The segment was deleted (retention, truncation, the log's deletion) or replaced by its
    compacted copy since the caller took it from the log's segment list: read the list again
    (``Log`` does, or answers LogClosedError when the log itself is gone)."""


class CorruptBatchError(KafkaError):
    """A stored batch does not parse: its length, magic, CRC or offsets are wrong (Kafka's
    CorruptRecordException, CORRUPT_MESSAGE to a reader). ``offset`` is the first offset
    the damage may hold: the one after the last good batch before ``position``."""

    def __init__(self, path: str, position: int, offset: int, reason: str):
        super().__init__(ErrorCode.CORRUPT_MESSAGE,
                         f"corrupt record batch in {path} at byte {position} (offset {offset} on): {reason}")
        self.path = path
        self.position = position
        self.offset = offset
        self.reason = reason


def batch_problem(h: BatchHeader, room: int, expected: int, base_offset: int) -> str | None:
    """What is wrong with the framing of a stored batch, or None: ``room`` is the number of
    bytes of the file from the batch's start, ``expected`` the lowest base offset it may
    have (the next offset after the batch before it), in a segment starting at ``base_offset``.
    The CRC is checked apart (it needs the whole batch). Pure: the simulator's disk model
    checks its batches with it too."""
    n = h.batch_length
    if n < MIN_BATCH_LENGTH:
        return f"batch length {n} is below the minimum {MIN_BATCH_LENGTH}"
    if h.magic != 2:
        return f"magic {h.magic} (only v2 batches are stored)"
    if n + LOG_OVERHEAD > room:
        return f"a batch of {n + LOG_OVERHEAD} bytes runs past the end of the segment ({room} bytes left)"
    last = h.base_offset + h.last_offset_delta
    if h.base_offset < expected or h.last_offset_delta < 0 or last - base_offset > INT32_MAX:
        return f"offsets {h.base_offset}..{last} are out of place (expected {expected} or above)"
    return None


def filename_prefix(offset: int) -> str:
    return f"{offset:020d}"


FILE_DELETE_DELAY_S = 60.0  # Kafka's file.delete.delay.ms (the topic config's default)
GRAVEYARD_MAX = 1024  # beyond this the retired descriptors due first are dropped early
# a heap of [deadline, seq, file] by deadline; file None: rescheduled earlier (a stale entry)
_graveyard: list[list] = []
_graveyard_seq = itertools.count()
_graveyard_lock = threading.Lock()
_open_lock = threading.Lock()


def retire(file: SegmentFile | None, delay_s: float = FILE_DELETE_DELAY_S) -> list | None:
    """Keep a segment's descriptor open for ``delay_s`` (a deleted segment's: its topic's
    file.delete.delay.ms, so its data stays on disk that long, as Kafka's ``.deleted`` files
    do): a fetch response still sending from it by fd number stays safe (an fd number must not
    be reused under it). Also reaps the expired ones. Returns the graveyard entry (for
    ``retire_sooner``)."""
    now = SYSTEM.monotonic()
    entry = None
    if file is not None:
        entry = [now + delay_s, next(_graveyard_seq), file]
        with _graveyard_lock:
            heapq.heappush(_graveyard, entry)
    reap_retired(now)
    return entry


def retire_sooner(entries: list[list], delay_s: float) -> None:
    """The descriptors of these graveyard entries go ``delay_s`` from now if that is sooner
    (a released segment's file, once the segment is deleted: its file.delete.delay.ms rules)."""
    deadline = SYSTEM.monotonic() + delay_s
    with _graveyard_lock:
        for e in entries:
            file = e[2]
            if file is not None and e[0] > deadline:
                e[2] = None  # stale: skipped when popped
                heapq.heappush(_graveyard, [deadline, next(_graveyard_seq), file])
    reap_retired()


def reap_retired(now: float | None = None, force: bool = False) -> int:
    """Drop the retired descriptors whose delay is over (``force``: all of them, when the
    process is out of descriptors; a read slice still holding one keeps it open)."""
    now = SYSTEM.monotonic() if now is None else now
    n = 0
    with _graveyard_lock:
        while _graveyard and (force or _graveyard[0][0] <= now or len(_graveyard) > GRAVEYARD_MAX):
            e = heapq.heappop(_graveyard)
            n += e[2] is not None
            e[2] = None  # closed by SegmentFile.__del__ once no ReadSlice holds it
    return n


class SegmentFile:
    """Owns the segment's descriptor; closes it when garbage (i.e. no reader holds it).
    ``used``: set on every use, cleared by the open-file cache's sweep (second chance)."""

    __slots__ = ("fd", "used", "__weakref__")

    def __init__(self, fd: int):
        self.fd = fd
        self.used = True

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            fio.close(fd)

    def __del__(self):
        try:
            self.close()
        except OSError:
            pass


EMFILE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE})


class OpenFiles:
    """The bound on the segment log files the process holds open (``krafty.log.open.files.max``).

    Kafka keeps every segment's files open; a broker with 100,000 partitions on a machine that
    lets a process open 20,000 files cannot. Here a segment opens its log file when it is used
    (indexes are read and written by path, never held) and this cache closes the least recently
    used ones beyond ``limit``: the CLOCK approximation of LRU (a ``used`` bit set on each use,
    a sweep that gives a used file a second chance and evicts an unused one), so that the hot
    path pays one attribute store, not a reordering. An evicted file is dropped by its segment
    (reopened by path on its next use) and closed once nothing holds it: a read slice or a
    write in flight keeps it open (every user of a segment's descriptor holds its SegmentFile,
    never the bare number, for as long as it uses it). Data written through it stays in the page cache: the next
    flush of that segment reopens it and fsyncs (an fsync covers the inode, whatever the fd).
    ``limit`` 0: half the process's open-files limit (RLIMIT_NOFILE), leaving the rest to sockets.
    Thread-safe: opens and sweeps run under ``_open_lock``."""

    def __init__(self, limit: int = 0):
        self._ring: collections.deque = collections.deque()  # (segment, file) in the order opened
        self.limit = limit or default_open_files_limit()
        self.evicted = 0

    def configure(self, limit: int) -> None:
        with _open_lock:
            self.limit = limit or default_open_files_limit()
            self._sweep(self.limit)

    def open(self, seg: LogSegment, flags: int, mode: int = 0o644) -> SegmentFile:
        """Open ``seg``'s log file and count it (caller holds ``_open_lock``). Out of
        descriptors (EMFILE/ENFILE): close half the cached ones and try once more."""
        try:
            fd = fio.open(seg.log_path, flags, mode)
        except OSError as e:
            if e.errno not in EMFILE_ERRNOS:
                raise
            self._ring = collections.deque(e for e in self._ring if _live(e))
            n = self._sweep(len(self._ring) // 2, force=True)
            reap_retired(force=True)
            log.warning("out of file descriptors opening %s (%s): closed %d cached segment files, trying again",
                        seg.log_path, e, n)
            fd = fio.open(seg.log_path, flags, mode)
        if len(self._ring) >= self.limit:
            self._sweep(self.limit - 1)  # before adding: the caller sets seg._file to the new one after
        f = SegmentFile(fd)
        self._ring.append((weakref.ref(seg), weakref.ref(f)))  # weak: a closed or dropped segment goes
        return f

    def _sweep(self, keep: int, force: bool = False) -> int:
        ring = self._ring
        n = 0
        spins = 2 * len(ring) + 1  # every used bit is cleared within one turn
        while len(ring) > keep and spins:
            spins -= 1
            entry = ring.popleft()
            if not _live(entry):
                continue  # closed, released or replaced meanwhile
            seg, f = entry[0](), entry[1]()
            if f.used and not force:
                f.used = False
                ring.append(entry)
                continue
            seg._file = None  # closed when the last holder lets go (now, unless a reader holds it)
            n += 1
        self.evicted += n
        return n

    def __len__(self) -> int:
        return sum(1 for e in self._ring if _live(e))


def _live(entry: tuple) -> bool:
    seg, f = entry[0](), entry[1]()
    return f is not None and seg is not None and seg._file is f and f.fd >= 0


def default_open_files_limit() -> int:
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        soft = 1024
    if soft <= 0 or soft == getattr(resource, "RLIM_INFINITY", -1):
        soft = 1 << 20
    return max(16, soft // 2)


OPEN_FILES = OpenFiles()


class LogSegment:
    # no instance dict: an idle broker of 100,000 partitions keeps 100,000 of these
    __slots__ = ("dir", "base_offset", "_prefix", "index", "time_index", "txn_index", "txn_stale",
                 "index_interval_bytes", "created_ms", "_file", "_released", "deleted", "size", "next_offset",
                 "max_timestamp", "offset_of_max_timestamp", "first_batch_timestamp", "_bytes_since_index",
                 "_recent_ends", "writeback_pos", "damage", "__weakref__")

    def __init__(self, dir: str, base_offset: int, *, index_interval_bytes: int, index_max_bytes: int,
                 created_ms: int):
        self.dir = dir
        self.base_offset = base_offset
        # the one path string of the segment's four files (the indexes share it)
        self._prefix = prefix = os.path.join(dir, filename_prefix(base_offset))
        me = weakref.ref(self)  # the indexes call back to rebuild a bad file; weak: no cycle
        self.index = OffsetIndex(prefix, base_offset, index_max_bytes, me)
        self.time_index = TimeIndex(prefix, base_offset, index_max_bytes, me)
        self.txn_index = TransactionIndex(prefix, base_offset)
        # the aborted transactions of this segment must be found again from the log (recovered or
        # a bad .txnindex): the log does it while it replays its producer state
        self.txn_stale = False
        self.index_interval_bytes = index_interval_bytes
        self.created_ms = created_ms
        self._file: SegmentFile | None = None
        self._released: list[list] | None = None  # graveyard entries of this segment's released descriptors
        self.deleted = False
        self.size = 0
        self.next_offset = base_offset  # offset after the last batch in the segment
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1  # base offset of the batch holding max_timestamp
        self.first_batch_timestamp: int | None = None  # for segment.ms rolling
        self._bytes_since_index = 0
        self._recent_ends: dict[int, int] = {}  # next offset after a batch -> file position
        self.writeback_pos = 0  # bytes below this were handed to the kernel's writeback
        # the first batch known not to parse (found at open or by a read); the bytes stay, reads
        # from it on answer CORRUPT_MESSAGE, a follower truncates to it and fetches again
        self.damage: CorruptBatchError | None = None

    # --- lifecycle ----------------------------------------------------------------------
    @classmethod
    def create(cls, dir: str, base_offset: int, *, index_interval_bytes: int, index_max_bytes: int,
               created_ms: int) -> LogSegment:
        seg = cls(dir, base_offset, index_interval_bytes=index_interval_bytes,
                  index_max_bytes=index_max_bytes, created_ms=created_ms)
        with _open_lock:
            seg._file = OPEN_FILES.open(seg, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        seg.index.reset()
        seg.time_index.reset()
        seg.txn_index.delete()  # a leftover of an earlier segment with this base
        return seg

    @classmethod
    def open(cls, dir: str, base_offset: int, *, index_interval_bytes: int, index_max_bytes: int,
             created_ms: int, recover: bool, on_batch=None, last: bool = False,
             txn_index: bool = True) -> tuple[LogSegment, int]:
        """Open an existing segment. With ``recover`` every batch is CRC-checked, a bad tail is
        truncated and the indexes rebuilt. Otherwise (flushed data) the indexes are loaded and
        the batches after the last index entry framing-checked; the ``last`` segment's tail
        (where a write torn by a power cut lands, even after a clean shutdown) is CRC-checked
        too, and a torn tail truncated after the last valid batch. A flushed segment that fails
        the check is CRC-scanned whole: a stale index is rebuilt; a damaged batch is kept in
        place and remembered (``damage``), never a reason to drop what precedes it.
        ``txn_index``: whether a ``.txnindex`` may exist (the caller listed the directory).
        Returns the segment and the number of bytes truncated."""
        seg = cls(dir, base_offset, index_interval_bytes=index_interval_bytes,
                  index_max_bytes=index_max_bytes, created_ms=created_ms)
        with _open_lock:
            f = seg._file = OPEN_FILES.open(seg, os.O_RDWR)
        if txn_index and not recover:
            try:
                seg.txn_index.load()
            except CorruptTxnIndexError as e:
                log.warning("%s; rebuilding it from the log", e)
                seg.txn_index.reset()
                seg.txn_stale = True
        seg.size = fio.fstat(f.fd).st_size
        try:
            seg.created_ms = int(fio.stat(seg.log_path).st_mtime * 1000) if seg.size else created_ms
        except OSError:
            pass
        if recover:
            return seg, seg.recover(on_batch)
        try:
            seg.index.load(seg.size)
            seg.time_index.load(2**63 - 1)
            seg._load_tail(verify=last)
        except CorruptIndexError as e:
            log.warning("%s: %s; checking the whole segment", seg.log_path, e)
            return seg, seg.recover(on_batch, truncate=last)
        return seg, 0

    @property
    def log_path(self) -> str:
        return self._prefix + LOG_SUFFIX

    @property
    def file(self) -> SegmentFile:
        """The open log file, opened on first use (old segments hold no descriptor until read)."""
        f = self._file
        if f is None:
            with _open_lock:  # a cleaner or flush thread may race the loop here
                f = self._file
                if f is None:
                    if self.deleted:
                        raise SegmentDeletedError(f"segment {self.log_path} was deleted or replaced")
                    f = self._file = OPEN_FILES.open(self, os.O_RDWR)
        f.used = True
        return f

    @property
    def fd(self) -> int:
        """The number only (tests, a one-off call): a user for longer holds ``file``, which keeps
        it open; the open-file cache may close the segment's file at any time."""
        return self.file.fd

    @property
    def is_open(self) -> bool:
        return self._file is not None

    def release(self) -> None:
        """Drop the descriptor (kept open a while for in-flight sends). Reopened on demand."""
        entry = retire(self._file)
        self._file = None
        if entry is not None:
            self._released = [e for e in self._released or () if e[2] is not None] + [entry]

    def close(self) -> None:
        """Write the final time index entry and the pending index entries; drop the file
        (closed at once unless a ReadSlice still holds it)."""
        self.seal()
        self._file = None

    def seal(self) -> None:
        """The segment stops being active (roll or close): record its max timestamp."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.index.write_pending()
        self.time_index.write_pending()

    def flush(self) -> None:
        self.flush_data()
        self.flush_indexes()

    def flush_data(self) -> None:
        """fsync the log file (through its descriptor: safe while the segment is deleted). A
        file the open-file cache closed is opened again: what was written through the closed
        descriptor is in the page cache, and fsync makes the inode's data durable."""
        if self.deleted:
            return
        try:
            f = self.file
        except SegmentDeletedError:
            return
        fio.fsync(f.fd)

    def flush_indexes(self) -> None:
        """Write out and fsync the index files (by path: the caller keeps deletion out)."""
        if not self.deleted:
            self.index.flush()
            self.time_index.flush()
            self.txn_index.flush()

    def start_writeback(self, min_bytes: int) -> int:
        """Start the kernel writing back the whole pages appended since the last call, once
        there are ``min_bytes`` of them (``sync_file_range(SYNC_FILE_RANGE_WRITE)``: starts
        the I/O, waits for nothing, makes nothing durable). Without it dirty pages pile up
        until the kernel's dirty threshold, where it throttles whoever writes next: the event
        loop, in a pwrite, for hundreds of milliseconds. Call it from a worker thread (it can
        wait for a free I/O request slot). Returns the bytes handed over."""
        f = self._file
        if f is None or self.deleted or _sync_file_range is None:
            return 0
        start = self.writeback_pos if self.writeback_pos <= self.size else 0  # truncated meanwhile
        end = self.size - self.size % _PAGE  # the partial last page is still being written
        if end - start < max(min_bytes, 1):
            return 0
        if _sync_file_range(f.fd, start, end - start, _SYNC_FILE_RANGE_WRITE) != 0:
            return 0  # a hint only (EBADF after a close race, EIO shows up at fsync)
        self.writeback_pos = end
        return end - start

    def ensure_index_files(self) -> None:
        self.index.ensure_file()
        self.time_index.ensure_file()

    def delete(self, delay_s: float = FILE_DELETE_DELAY_S) -> None:
        """Unlink the files; the data stays ``delay_s`` on disk (see retire). An in-flight
        sendfile keeps reading through its SegmentFile."""
        self.detach(delay_s)
        for p in (self.log_path, self.index.path, self.time_index.path):
            try:
                fio.unlink(p)
            except FileNotFoundError:
                pass
        self.txn_index.delete()

    def load_indexes(self) -> None:
        """Read both indexes into memory now (they are read lazily, by path): before this
        segment is replaced, so that a reader still holding it never reads the new files'."""
        self.index._ensure()
        self.time_index._ensure()

    def detach(self, delay_s: float = FILE_DELETE_DELAY_S) -> None:
        """This object no longer stands for the files at its paths (deleted, or replaced by a
        compacted copy): reads through it raise SegmentDeletedError, and its indexes never
        touch those paths again (another segment's files may be there now)."""
        self.deleted = True
        retire(self._file, delay_s)
        self._file = None
        if self._released:
            retire_sooner(self._released, delay_s)
            self._released = None
        self.index.detach()
        self.time_index.detach()
        self.txn_index.detach()

    # --- appends ------------------------------------------------------------------------
    def append(self, buf, headers: list[BatchHeader], nbytes: int) -> None:
        """Write ``buf[:nbytes]`` (whole batches described by ``headers``, positions relative
        to ``buf``) at the end of the segment in one write, and index it."""
        start = self.size
        file = self.prepare_append()
        write_at(file, memoryview(buf)[:nbytes], start)
        self.commit_append(headers, start, nbytes)

    def prepare_append(self) -> SegmentFile:
        """Before writing at ``self.size``: load (or rebuild) the indexes before the data they
        will cover; returns the open file to write to (hold it: it keeps the fd valid)."""
        self.index._ensure()
        self.time_index._ensure()
        return self.file

    def commit_append(self, headers: list[BatchHeader], start: int, nbytes: int) -> None:
        """The batches described by ``headers`` are on file at ``start`` (= ``self.size``):
        index them and move the segment's end past them."""
        interval = self.index_interval_bytes
        since = self._bytes_since_index
        max_ts = self.max_timestamp
        ends = self._recent_ends
        buf0 = headers[0].pos
        for h in headers:
            ts = h.max_timestamp
            if ts > max_ts:
                max_ts = ts
                self.offset_of_max_timestamp = h.base_offset
            if since > interval:
                self.index.append(h.base_offset, start + h.pos - buf0)
                self.max_timestamp = max_ts
                self.time_index.maybe_append(max_ts, self.offset_of_max_timestamp)
                since = 0
            since += h.batch_length + LOG_OVERHEAD
        last = headers[-1]
        end = start + nbytes
        ends[last.base_offset + last.last_offset_delta + 1] = end
        if len(ends) > _RECENT_ENDS:
            del ends[next(iter(ends))]
        self._bytes_since_index = since
        self.max_timestamp = max_ts
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = headers[0].max_timestamp
        self.size = end
        self.next_offset = last.base_offset + last.last_offset_delta + 1

    # --- reads --------------------------------------------------------------------------
    def iter_headers(self, pos: int = 0, end: int | None = None, expected: int | None = None
                     ) -> Iterator[BatchHeader]:
        """Headers of the batches from file position ``pos`` (a batch start) to ``end``,
        framing-checked (``batch_problem``): a batch that does not parse raises
        CorruptBatchError rather than ending the scan quietly, which would hide every later
        batch. ``expected``: the offset the first batch starts at or after (default the base)."""
        size = self.size
        end = size if end is None else end
        expected = self.base_offset if expected is None else expected
        f = self.file  # held: an eviction while this runs must not close the descriptor under it
        fd = f.fd
        base = self.base_offset
        while pos < end:
            if pos + HEADER_SIZE > size:
                raise self._corrupt(pos, expected, f"the last {size - pos} bytes are not a whole batch header")
            chunk = fio.pread(fd, min(_SCAN_CHUNK, size - pos), pos)
            n = len(chunk)
            if n < HEADER_SIZE:
                raise self._corrupt(pos, expected, f"the file ends before the segment's {size} bytes")
            off = 0
            while off + HEADER_SIZE <= n:
                h = unpack_header(chunk, off)
                h.pos = pos + off
                problem = batch_problem(h, size - h.pos, expected, base)
                if problem is not None:
                    raise self._corrupt(h.pos, expected, problem)
                yield h
                expected = h.base_offset + h.last_offset_delta + 1
                off += h.batch_length + LOG_OVERHEAD
                if pos + off >= end:
                    return
            pos += off

    def _corrupt(self, pos: int, offset: int, reason: str) -> CorruptBatchError:
        return CorruptBatchError(self.log_path, pos, offset, reason)

    def verify_batch(self, h: BatchHeader) -> None:
        """CRC32C-check one batch (whose framing was checked); CorruptBatchError if it fails."""
        data = _pread(self, h.size, h.pos)
        if len(data) != h.size or crc32c(memoryview(data)[ATTRIBUTES_OFFSET:]) != h.crc:
            raise self._corrupt(h.pos, h.base_offset, "CRC32C mismatch")

    def check_read_start(self, h: BatchHeader) -> None:
        """The batch a read starts with, checked so that a reader stuck on a damaged batch gets
        an error, not the same unparseable bytes on every fetch: its CRC when it is small
        (READ_CRC_MAX_BYTES: a few microseconds); for a larger one, that its length leads to a
        well-framed next batch (one header read) rather than a CRC over a whole megabyte."""
        if h.size <= READ_CRC_MAX_BYTES:
            self.verify_batch(h)
            return
        nxt = h.pos + h.size
        if nxt >= self.size:
            return
        buf = _pread(self, HEADER_SIZE, nxt)
        problem = "the file ends" if len(buf) < HEADER_SIZE else None
        if problem is None:
            n = unpack_header(buf, 0)
            problem = batch_problem(n, self.size - nxt, h.next_offset, self.base_offset)
        if problem is not None:
            raise self._corrupt(h.pos, h.base_offset, f"its length {h.batch_length} does not lead to a batch at byte "
                                                      f"{nxt}: {problem}")

    def translate(self, offset: int, start_pos: int = 0) -> BatchHeader | None:
        """Header of the first batch whose last offset is >= ``offset`` (None if none). A batch
        that starts where a recent one ended is read at once (a follower's or a consumer's next
        fetch starts there), without scanning from the index entry before it."""
        pos = self._recent_ends.get(offset)
        if pos is not None and start_pos <= pos and pos + HEADER_SIZE <= self.size:
            buf = _pread(self, HEADER_SIZE, pos)
            if len(buf) == HEADER_SIZE:
                h = unpack_header(buf, 0)
                h.pos = pos
                problem = batch_problem(h, self.size - pos, offset, self.base_offset)
                if problem is not None:
                    raise self._corrupt(pos, offset, problem)
                return h
        entry_offset, pos = self.index.lookup_entry(offset)
        if start_pos > pos:
            pos, entry_offset = start_pos, None
        for h in self.iter_headers(pos, expected=entry_offset):
            if h.base_offset + h.last_offset_delta >= offset:
                return h
        return None

    def confirm_damage(self, err: CorruptBatchError) -> CorruptBatchError | None:
        """A scan that started at an index entry (or a read's check) failed at ``err.position``.
        Scan again from the entry before it, CRC-checking the batch there: the first batch that
        fails from that known point is the damage, remembered with the exact offset it starts
        at; if none does, the index is what was wrong (rebuilt; None)."""
        entry_offset, pos = self.index.entry_before(err.position)
        try:
            for h in self.iter_headers(pos, expected=entry_offset):
                if h.pos == err.position:
                    self.verify_batch(h)  # its framing holds from a known point: does its CRC?
                elif h.pos > err.position or h.pos + h.size > err.position:
                    break  # past it with nothing wrong, or it lies inside a good batch
        except CorruptBatchError as e:
            return self._remember(e)
        log.warning("%s: index entries before byte %d do not point at batches; rebuilding the indexes",
                    self.log_path, err.position)
        self._rebuild_indexes()
        return None

    def _remember(self, err: CorruptBatchError) -> CorruptBatchError:
        if self.damage is None or err.position < self.damage.position:
            self.damage = err
        return self.damage

    def position_of(self, offset: int, start_pos: int = 0) -> int:
        """File position of the first batch with last offset >= ``offset``; the segment size if
        every batch is below it. Used to bound reads at the high watermark."""
        if offset >= self.next_offset:
            return self.size
        pos = self._recent_ends.get(offset)
        if pos is not None:
            return pos
        h = self.translate(offset, start_pos)
        return self.size if h is None else h.pos

    def boundary_at_or_before(self, limit: int, start: int) -> int:
        """The largest batch end position <= ``limit``, scanning batches from ``start``."""
        pos = max(start, self.index.floor_position(limit))
        end = pos
        for h in self.iter_headers(pos, self.size):
            nxt = h.pos + h.batch_length + LOG_OVERHEAD
            if nxt > limit:
                break
            end = nxt
        return end

    # --- recovery -----------------------------------------------------------------------
    def _load_tail(self, verify: bool = False) -> None:
        """After loading the indexes: find next_offset and the max timestamp by scanning from
        the last index entry to the end of the file. CorruptIndexError unless the entry points
        at the batch of its offset and whole, well-framed batches (with ``verify`` also
        CRC-valid ones) run from there exactly to the end of the file: a batch cut short or a
        partial header must never pass for the end of the segment (the next appends would go
        after it, and the next recovery would cut them off)."""
        indexed = len(self.index) > 0
        last_off, pos = self.index.last_entry
        self.next_offset = self.base_offset
        te = self.time_index.last_entry
        if te is not None:
            self.max_timestamp, self.offset_of_max_timestamp = te
        first = True
        since = 0
        try:
            for h in self.iter_headers(pos, expected=last_off):
                if first and indexed and h.base_offset != last_off:
                    raise CorruptIndexError(f"the last index entry (offset {last_off}, byte {pos}) points at the "
                                            f"batch of offset {h.base_offset}")
                if verify:
                    self.verify_batch(h)
                if first and pos == 0:
                    self.first_batch_timestamp = h.max_timestamp
                first = False
                if h.max_timestamp > self.max_timestamp:
                    self.max_timestamp = h.max_timestamp
                    self.offset_of_max_timestamp = h.base_offset
                self.next_offset = h.base_offset + h.last_offset_delta + 1
                since += h.batch_length + LOG_OVERHEAD
        except CorruptBatchError as e:
            raise CorruptIndexError(f"byte {e.position}: {e.reason}") from e
        self._bytes_since_index = since
        if self.first_batch_timestamp is None and self.size >= HEADER_SIZE:
            self.first_batch_timestamp = unpack_header(_pread(self, HEADER_SIZE, 0), 0).max_timestamp
        if self.size and self.next_offset == self.base_offset and pos == 0:
            raise CorruptIndexError("no batch found in a non-empty segment")

    def recover(self, on_batch=None, truncate: bool = True) -> int:
        """Validate every batch (framing, magic, CRC32C, increasing offsets) and rebuild both
        indexes. ``on_batch(header)`` sees every valid batch. At the first bad batch: with
        ``truncate`` (unflushed data, a torn tail) the file is cut there; without (flushed data
        that went bad) the bytes stay and the batch is remembered as ``damage``. Returns the
        number of bytes truncated. The transaction index is left for the log to rebuild
        (``txn_stale``): its entries come from the producer state."""
        self.index.reset()
        self.time_index.reset()
        self.txn_index.reset()
        self.txn_stale = True
        self._recent_ends.clear()
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.first_batch_timestamp = None
        self._bytes_since_index = 0
        self.next_offset = self.base_offset
        f = self.file  # held: an eviction while this runs must not close the descriptor under it
        fd = f.fd
        file_size = self.size
        valid = 0
        chunk_pos = 0
        chunk = b""
        interval = self.index_interval_bytes
        since = 0
        expected = self.base_offset
        problem = None
        while valid < file_size:
            rel = valid - chunk_pos
            if rel + HEADER_SIZE > len(chunk):
                chunk_pos = valid
                chunk = fio.pread(fd, max(_RECOVER_CHUNK, HEADER_SIZE), valid)
                rel = 0
                if len(chunk) < HEADER_SIZE:
                    problem = f"the last {file_size - valid} bytes are not a whole batch header"
                    break
            h = unpack_header(chunk, rel)
            h.pos = valid
            problem = batch_problem(h, file_size - valid, expected, self.base_offset)
            if problem is not None:
                break
            size = h.batch_length + LOG_OVERHEAD
            if rel + size > len(chunk):
                chunk_pos = valid
                chunk = fio.pread(fd, max(_RECOVER_CHUNK, size), valid)
                rel = 0
                if len(chunk) < size:
                    problem = "the file ends inside the batch"
                    break
            if crc32c(memoryview(chunk)[rel + ATTRIBUTES_OFFSET:rel + size]) != h.crc:
                problem = "CRC32C mismatch"
                break
            if on_batch is not None:
                on_batch(h)
            if self.first_batch_timestamp is None:
                self.first_batch_timestamp = h.max_timestamp
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp = h.max_timestamp
                self.offset_of_max_timestamp = h.base_offset
            if since > interval:
                self.index.append(h.base_offset, valid)
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
                since = 0
            since += size
            expected = h.base_offset + h.last_offset_delta + 1
            valid += size
        self._bytes_since_index = since
        self.next_offset = expected
        truncated = file_size - valid
        if truncated and truncate:
            log.warning("%s: truncating %d bytes from byte %d (offset %d on): %s", self.log_path, truncated, valid,
                        expected, problem)
            fio.ftruncate(fd, valid)
            self.size = valid
        elif truncated:
            self.damage = self._corrupt(valid, expected, problem or "unreadable")
            truncated = 0
        self.index.write_pending()
        self.time_index.write_pending()
        return truncated

    def _rebuild_indexes(self) -> None:
        """An index file failed its check when first used: rebuild both from the batch headers."""
        self.index.reset()
        self.time_index.reset()
        interval = self.index_interval_bytes
        since = 0
        max_ts, off_max = -1, -1
        for h in self._headers_before_damage(0):
            if h.max_timestamp > max_ts:
                max_ts, off_max = h.max_timestamp, h.base_offset
            if since > interval:
                self.index.append(h.base_offset, h.pos)
                self.time_index.maybe_append(max_ts, off_max)
                since = 0
            since += h.batch_length + LOG_OVERHEAD
        self._bytes_since_index = since
        self.index.write_pending()
        self.time_index.write_pending()

    def _headers_before_damage(self, pos: int) -> Iterator[BatchHeader]:
        """``iter_headers`` that ends quietly at a damaged batch (remembering it): for the
        index rebuild, which must index what can be read."""
        try:
            yield from self.iter_headers(pos)
        except CorruptBatchError as e:
            self._remember(e)

    def truncate_to(self, offset: int) -> int:
        """Remove the batches with base offset >= ``offset``; returns bytes removed. The
        batch containing ``offset`` (if it starts below) is removed too: batches are atomic,
        so truncation points are batch boundaries in practice. A damaged batch before
        ``offset`` goes too, with everything after it."""
        try:
            h = self.translate(offset)
            pos = None if h is None else h.pos
        except CorruptBatchError as e:
            damage = self.confirm_damage(e)
            if damage is None:  # it was the index: rebuilt, look again
                return self.truncate_to(offset)
            pos, offset = damage.position, min(offset, damage.offset)  # nothing after it can be kept
        if pos is None:
            return 0
        removed = self.size - pos
        f = self.file
        fio.ftruncate(f.fd, pos)
        fio.fsync(f.fd)  # divergent data must not come back after a crash
        self.size = pos
        self.writeback_pos = min(self.writeback_pos, pos)
        self.index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self._recent_ends.clear()
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.first_batch_timestamp = None
        if self.damage is not None and self.damage.position >= pos:
            self.damage = None
        self._load_tail()
        return removed

    def read_batch(self, pos: int, size: int) -> bytes:
        return _pread(self, size, pos)
