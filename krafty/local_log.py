"""The single-node metadata log: a durable local file with no network quorum.

It implements raft.api.MetadataLog for a node that is the only controller: every append is
written and fsync'd, then handed to listeners as committed. Format, one entry per append:
    length u32 | crc32c u32 | payload (JSON: base offset, epoch, timestamp, records)
A torn or corrupt tail (crash during a write) is truncated on start."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import struct
import time

import crc32c

from raft.api import Batch, LeaderAndEpoch, Listener

log = logging.getLogger("krafty.metadata.local")
_HDR = struct.Struct(">II")


class LocalMetadataLog:
    def __init__(self, directory: str, node_id: int):
        self.node_id = node_id
        self.dir = directory
        self.path = os.path.join(directory, "metadata.log")
        self.state_path = os.path.join(directory, "quorum-state")
        self._listeners: list[Listener] = []
        self._epoch = 0
        self._next_offset = 0
        self._fd = -1
        self._lock = asyncio.Lock()

    def register(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def leader(self) -> LeaderAndEpoch:
        return LeaderAndEpoch(self.node_id if self._fd >= 0 else None, self._epoch)

    async def start(self) -> None:
        os.makedirs(self.dir, exist_ok=True)
        batches, good_end = self._read_all()
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        if os.fstat(self._fd).st_size != good_end:
            log.warning("truncating torn metadata log tail at byte %d", good_end)
            os.ftruncate(self._fd, good_end)
            os.fsync(self._fd)
        os.lseek(self._fd, 0, os.SEEK_END)
        if batches:
            self._next_offset = batches[-1].last_offset + 1
            self._epoch = max(b.epoch for b in batches)
            for lst in self._listeners:
                lst.handle_commit(batches)
        try:
            with open(self.state_path) as f:
                self._epoch = max(self._epoch, json.load(f)["epoch"])
        except (OSError, ValueError, KeyError):
            pass
        self._epoch += 1
        tmp = self.state_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"epoch": self._epoch, "leader": self.node_id}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.state_path)
        for lst in self._listeners:
            lst.handle_leader_change(self.leader())

    def _read_all(self) -> tuple[list[Batch], int]:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return [], 0
        pos, out = 0, []
        while pos + _HDR.size <= len(data):
            length, crc = _HDR.unpack_from(data, pos)
            payload = data[pos + _HDR.size: pos + _HDR.size + length]
            if len(payload) != length or crc32c.crc32c(payload) != crc:
                break
            d = json.loads(payload)
            out.append(Batch(d["o"], d["e"], d["ts"], [x.encode() for x in d["r"]]))
            pos += _HDR.size + length
        return out, pos

    async def append(self, records, expected_epoch: int | None = None) -> int:
        if not records:
            raise ValueError("empty append")
        async with self._lock:
            batch = Batch(self._next_offset, self._epoch, int(time.time() * 1000), list(records))
            payload = json.dumps({"o": batch.base_offset, "e": batch.epoch, "ts": batch.append_timestamp_ms,
                                  "r": [x.decode() for x in records]}, separators=(",", ":")).encode()
            os.write(self._fd, _HDR.pack(len(payload), crc32c.crc32c(payload)) + payload)
            await asyncio.get_running_loop().run_in_executor(None, os.fsync, self._fd)
            self._next_offset = batch.last_offset + 1
            for lst in self._listeners:
                lst.handle_commit([batch])
            return batch.last_offset

    async def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
