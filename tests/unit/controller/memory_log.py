"""A single-node metadata log in memory (raft.api.MetadataLog): it leads epoch 1 from ``start``
and commits every proposal on the next loop iteration. For tests of the controller loop that are
about the loop, not about Raft."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from raft.api import Batch, LeaderAndEpoch, Listener, NotLeaderError


class MemoryMetadataLog:
    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.listeners: list[Listener] = []
        self._leader = LeaderAndEpoch(None, 0)
        self._end = 0
        self._closed = False

    def register(self, listener: Listener) -> None:
        self.listeners.append(listener)

    def leader(self) -> LeaderAndEpoch:
        return self._leader

    async def start(self) -> None:
        self._leader = LeaderAndEpoch(self.node_id, 1)
        for lst in self.listeners:
            lst.handle_leader_change(self._leader)

    async def close(self) -> None:
        self._closed = True
        self._leader = LeaderAndEpoch(None, 2)
        for lst in self.listeners:
            lst.handle_leader_change(self._leader)
        await asyncio.sleep(0)

    def next_offset(self) -> int:
        return self._end

    def propose(self, records: Sequence[bytes], expected_epoch: int | None = None) -> tuple[int, asyncio.Future]:
        if self._closed or (expected_epoch is not None and expected_epoch != self._leader.epoch):
            raise NotLeaderError(self._leader)
        base = self._end
        self._end += len(records)
        fut = asyncio.get_running_loop().create_future()
        batch = Batch(base, self._leader.epoch, int(time.time() * 1000), tuple(records))

        def commit() -> None:
            for lst in self.listeners:
                lst.handle_commit([batch])
            if not fut.done():
                fut.set_result(batch.last_offset)
        asyncio.get_running_loop().call_soon(commit)
        return batch.last_offset, fut

    async def append(self, records: Sequence[bytes], expected_epoch: int | None = None) -> int:
        _last, fut = self.propose(records, expected_epoch)
        return await fut
