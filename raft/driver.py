"""The asyncio shell around the sans-IO core: ``RaftMetadataLog`` (the ``MetadataLog`` of
a controller quorum member or of a broker observing it).

One task runs the core: it persists each Ready through the SQLite store (fsync'd), only
then sends its messages and tells the listeners, then advances the core and sleeps until
the core's next deadline or new input. Inputs (RPCs, proposals) step the core directly on
the event loop thread and wake that task.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import random
from collections.abc import Callable, Sequence

import grpc

from common.clock import SYSTEM, Clock
from common.errors import ErrorCode
from common.net import REAL, Net
from proto import MAX_GRPC_MESSAGE
from proto import raft_pb2 as pb
from proto import raft_pb2_grpc as pb_grpc
from proto.cluster_id import client_interceptors, server_interceptors
from raft.api import Batch, LeaderAndEpoch, Listener, NotLeaderError, Snapshot
from raft.core import Committed, LeaderChange, LoadSnapshot, RaftCore, Role, Timeouts, Voter, VoterChangeError
from raft.messages import NONE, NOT_LEADER, Message
from raft.metrics import RaftStats
from raft.store import SqliteStore
from raft.transport import GrpcTransport, RaftServicer

log = logging.getLogger("krafty.raft")

# snapshot_provider(end_offset) -> the state machine's records that recreate its state with
# every record below end_offset applied (it is called right after handle_commit up to there).
SnapshotProvider = Callable[[int], Sequence[bytes]]


def timeouts_from_config(cfg) -> Timeouts:
    return Timeouts(
        election_ms=cfg["controller.quorum.election.timeout.ms"],
        fetch_ms=cfg["controller.quorum.fetch.timeout.ms"],
        election_backoff_max_ms=cfg["controller.quorum.election.backoff.max.ms"],
        append_linger_ms=cfg["controller.quorum.append.linger.ms"],
        request_ms=cfg["controller.quorum.request.timeout.ms"],
        retry_backoff_ms=cfg["controller.quorum.retry.backoff.ms"],
    )


BOOTSTRAP_VOTERS = "bootstrap.voters"  # in the metadata log dir: the initial voters of a dynamic quorum


def write_bootstrap_voters(metadata_dir: str, voters: Sequence[Voter]) -> None:
    """``krafty storage format --standalone / --initial-controllers``: the voter set a new
    dynamic quorum (kraft.version 1) starts with; its first leader writes it to the log."""
    import json

    path = os.path.join(metadata_dir, BOOTSTRAP_VOTERS)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump([[v.id, v.directory_id, v.host, v.port] for v in voters], f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


def read_bootstrap_voters(metadata_dir: str) -> list[Voter] | None:
    import json

    try:
        with open(os.path.join(metadata_dir, BOOTSTRAP_VOTERS), encoding="utf-8") as f:
            return [Voter(int(i), str(d), str(h), int(p)) for i, d, h, p in json.load(f)]
    except FileNotFoundError:
        return None


class _Pending:
    __slots__ = ("epoch", "last", "future", "at")

    def __init__(self, epoch: int, last: int, future: asyncio.Future, at: int = -1) -> None:
        self.epoch, self.last, self.future, self.at = epoch, last, future, at


class RaftMetadataLog:
    """``MetadataLog`` over a Raft quorum. Voters (ids in ``voters``) serve the quorum RPCs on
    ``listen``; any other node is an observer that only fetches."""

    def __init__(self, node_id: int, voters: Sequence[tuple[int, str, int]], data_dir: str, *,
                 listen: tuple[str, int] | None = None, timeouts: Timeouts = Timeouts(),
                 snapshot_provider: SnapshotProvider | None = None,
                 max_bytes_between_snapshots: int = 20 * 1024 * 1024, rng: random.Random | None = None,
                 initial_voters: Sequence[Voter] | None = None,
                 bootstrap_servers: Sequence[tuple[str, int]] = (),
                 clock: Clock = SYSTEM, net: Net = REAL, store=None) -> None:
        self.node_id = node_id
        self.net = net  # where the quorum RPCs go (gRPC, or sim/'s network)
        self.clock = clock  # the core's time is monotonic; DescribeQuorum shows wall-clock timestamps
        self.voters = {vid: (host, port) for vid, host, port in voters}
        # KIP-853: the initial voters of a quorum formatted for dynamic voters (bootstrap.voters),
        # and controller.quorum.bootstrap.servers, where a node with neither finds the quorum
        self.initial_voters = list(initial_voters) if initial_voters is not None else None
        self.bootstrap_servers = list(bootstrap_servers)
        if self.initial_voters is not None:
            self.voters.update({v.id: (v.host, v.port) for v in self.initial_voters if v.host})
        self.is_voter = node_id in self.voters
        self.advertised: tuple[str, int] | None = None  # this controller's listener as voters reach it
        self._updating: asyncio.Task | None = None
        self.data_dir = data_dir
        self.listen = listen if listen is not None else self.voters.get(node_id)
        self.timeouts = timeouts
        self.snapshot_provider = snapshot_provider
        self.max_bytes_between_snapshots = max_bytes_between_snapshots
        self.rng = rng or clock.rng
        self.listeners: list[Listener] = []
        # Extra gRPC services to serve on the controller listener, e.g. the controller's own:
        # each is called with the grpc.aio.Server before it starts (voters only).
        self.servicers: list[Callable[[grpc.aio.Server], None]] = []
        self.cluster_id = ""  # reported by DescribeQuorum
        self.store = store if store is not None else SqliteStore(data_dir)  # sim/ passes its own disk
        self.core: RaftCore | None = None
        self.transport: GrpcTransport | None = None
        self.server: grpc.aio.Server | None = None
        # other services to serve on the controller listener (e.g. the controller service)
        self.servicers: list[Callable[[grpc.aio.Server], None]] = []
        self.bound_port: int | None = None
        # TLS of the controller listener (grpc ServerCredentials / ChannelCredentials), None = plaintext;
        # set by the node from the controller listener's ssl.* keys (broker/security/ssl.py)
        self.server_credentials: grpc.ServerCredentials | None = None
        self.channel_credentials: grpc.ChannelCredentials | None = None
        self._t0 = clock.monotonic()
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._pending: list[_Pending] = []
        self._bytes_since_snapshot = 0
        self._delivered_end = 0  # listeners have applied every record below this offset
        self._closing = False
        self._stopped = False
        self._leader = LeaderAndEpoch(None, 0)
        # Our own leadership is announced to listeners only once they have applied every
        # entry up to the epoch's start (its leader-change record), as KafkaRaftClient does:
        # before that a new leader's state machine may miss entries an old leader committed.
        self._held_leader: tuple[LeaderAndEpoch, int] | None = None
        self.stats = RaftStats(self.now_ms())  # raft-metrics (raft/metrics.py)

    @classmethod
    def from_config(cls, cfg, snapshot_provider: SnapshotProvider | None = None, *,
                    clock: Clock = SYSTEM, net: Net = REAL, store=None) -> RaftMetadataLog:
        node_id = cfg["node.id"]
        voters = cfg["controller.quorum.voters"]
        listen = None
        if node_id in {v[0] for v in voters}:
            names = cfg["controller.listener.names"]
            lst = next((cfg.listener(n) for n in names if cfg.listener(n) is not None), None)
            if lst is not None:
                listen = (lst.host or "0.0.0.0", lst.port)
        if listen is None and "controller" in cfg["process.roles"]:  # a controller that is not a voter (yet)
            names = cfg["controller.listener.names"]
            lst = next((cfg.listener(n) for n in names if cfg.listener(n) is not None), None)
            if lst is not None:
                listen = (lst.host or "0.0.0.0", lst.port)
        data_dir = os.path.join(cfg["metadata.log.dir"], "__cluster_metadata-0")
        bootstrap = []
        for s in cfg["controller.quorum.bootstrap.servers"]:
            host, _, port = s.rpartition(":")
            bootstrap.append((host.strip("[]"), int(port)))
        log_ = cls(node_id, voters, data_dir, listen=listen, timeouts=timeouts_from_config(cfg),
                   snapshot_provider=snapshot_provider,
                   max_bytes_between_snapshots=cfg["metadata.log.max.record.bytes.between.snapshots"],
                   initial_voters=read_bootstrap_voters(cfg["metadata.log.dir"]), bootstrap_servers=bootstrap,
                   clock=clock, net=net, store=store)
        if listen is not None:
            log_.advertised = (listen[0] if listen[0] not in ("0.0.0.0", "::", "") else "localhost", listen[1])
        return log_

    # ------------------------------------------------------------------ MetadataLog
    def register(self, listener: Listener) -> None:
        self.listeners.append(listener)

    def leader(self) -> LeaderAndEpoch:
        return self._leader

    def now_ms(self) -> int:
        return int((self.clock.monotonic() - self._t0) * 1000)

    async def append(self, records: Sequence[bytes], expected_epoch: int | None = None) -> int:
        _last, fut = self.propose(records, expected_epoch)
        return await fut

    def propose(self, records: Sequence[bytes], expected_epoch: int | None = None) -> tuple[int, asyncio.Future]:
        if self.core is None or self._closing:
            raise NotLeaderError(self._leader)
        now = self.now_ms()
        epoch, last = self.core.propose(list(records), now, expected_epoch)
        fut = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(epoch, last, fut, now))
        self.stats.proposed(len(records), now)
        self._wake.set()
        return last, fut

    def next_offset(self) -> int:
        core = self.core
        return -1 if core is None else core.log_end + core.accum_count

    async def start(self) -> None:
        state, snap, entries = await self.store.open()
        static = sorted(self.voters)
        if not static and self.initial_voters is None and not entries and snap is None:
            # a node joining a dynamic quorum: learn the leader from controller.quorum.bootstrap.servers
            static = await self._discover()
        self.core = RaftCore(self.node_id, static, self.rng, self.timeouts, state=state,
                             snapshot=snap, entries=entries, now_ms=self.now_ms(), initial_voters=self.initial_voters,
                             endpoint=self.advertised)
        self.voters.update({v.id: (v.host, v.port) for v in self.core.voter_info.values() if v.host})
        self.is_voter = self.core.is_voter
        peers = dict(self.voters)
        self.transport = GrpcTransport(self.node_id, peers, self._deliver, self._unreachable,
                                       self.timeouts.request_ms / 1000, credentials=self.channel_credentials,
                                       cluster_id=self.cluster_id or None, clock=self.clock, net=self.net)
        if self.listen is not None:
            self.server = self.net.grpc_server([("grpc.so_reuseport", 0),
                                                ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE)],
                                               server_interceptors(self.cluster_id or None))
            pb_grpc.add_RaftQuorumServicer_to_server(RaftServicer(self.transport, self.describe_pb, self.change_voters),
                                                     self.server)
            for add in self.servicers:
                add(self.server)
            addr = f"{self.listen[0]}:{self.listen[1]}"
            try:  # (grpc raises RuntimeError, older versions return 0)
                self.bound_port = (self.server.add_secure_port(addr, self.server_credentials)
                                   if self.server_credentials else self.server.add_insecure_port(addr))
            except RuntimeError:
                self.bound_port = 0
            if self.bound_port == 0:
                raise OSError(errno.EADDRINUSE, f"cannot bind the controller listener to {addr}: the address is in "
                                                "use or not available")
            await self.server.start()
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"raft-{self.node_id}")
        log.info("node %d: metadata quorum started (%s, epoch %d, log end %d)", self.node_id,
                 "voter" if self.is_voter else "observer", self.core.epoch, self.core.log_end)

    def failure(self) -> BaseException | None:
        """The error that ended the metadata log's loop, if it died (the node cannot go on)."""
        t = self._task
        if t is None or not t.done() or t.cancelled() or self._closing:
            return None
        return t.exception()

    async def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        if self.core is not None and self.core.role is Role.LEADER and self._task is not None:
            # Graceful resignation: EndQuorumEpoch lets a successor take over without a timeout.
            self.core.resign(self.now_ms())
            self._wake.set()
            await asyncio.sleep(0)
            for _ in range(50):
                if not self.core.has_ready():
                    break
                await asyncio.sleep(0.005)
            if self.transport is not None:
                await self.transport.drain(0.2)
        if self._task is not None:
            # Let the loop finish the Ready it is persisting, then stop; cancel only if it hangs.
            self._stopped = True
            self._wake.set()
            await asyncio.wait([self._task], timeout=2)
            if not self._task.done():
                self._task.cancel()
                await asyncio.wait([self._task], timeout=5)
            if self._task.done() and not self._task.cancelled() and self._task.exception() is not None:
                log.debug("node %d: metadata loop ended with %r", self.node_id, self._task.exception())
        if self._updating is not None:
            self._updating.cancel()
        if self.server is not None:
            await self.server.stop(grace=None)
        if self.transport is not None:
            await self.transport.close()
        await self.store.close()
        for p in self._pending:
            if not p.future.done():
                p.future.set_exception(NotLeaderError(self._leader))
        self._pending.clear()

    # ------------------------------------------------------------------ inputs
    def _deliver(self, msg: Message) -> None:
        if self.core is not None and self._task is not None and not self._task.done():
            self.core.step(msg, self.now_ms())
            self._wake.set()

    def _unreachable(self, peer: int, corr: int) -> None:
        if self.core is not None:
            self.core.peer_unreachable(peer, corr, self.now_ms())
            self._wake.set()

    # ------------------------------------------------------------------ the loop
    async def _run(self) -> None:
        core = self.core
        while not self._stopped:
            try:
                core.poll(self.now_ms())
                while (r := core.take_ready()) is not None:
                    await self.store.apply(r.ops)  # durable before anything that depends on it
                    self._sync_peers()
                    for msg in r.messages:
                        self.transport.send(msg)
                    self._notify(r.notifications)
                    core.advance(r, self.now_ms())
                    self._maybe_snapshot()
                    core.poll(self.now_ms())
                self.stats.role(core.role, core.epoch, self.now_ms())
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("node %d: metadata log failed; stopping the quorum member", self.node_id)
                raise
            delay = (core.next_deadline() - self.now_ms()) / 1000
            if delay > 0 and not self._wake.is_set():
                # (not asyncio.wait_for: on 3.11 it can swallow a cancellation)
                try:
                    async with asyncio.timeout(min(delay, 3600)):
                        await self._wake.wait()
                except TimeoutError:
                    pass
            self._wake.clear()

    def _sync_peers(self) -> None:
        """The voters' addresses from the voter set in the log (KIP-853), and the leader's from
        the leader itself (BeginQuorumEpoch's leader endpoints, the node endpoints of answers):
        a voter that moved and then won an election is reached at its new listener before this
        node has fetched the voters record with it. A voter whose own listener differs from its
        entry in the voter set asks the leader to update it (UpdateRaftVoter)."""
        core = self.core
        want = {v.id: (v.host, v.port) for v in core.voter_info.values() if v.host}
        lid = core.leader_id
        if lid is not None and lid != self.node_id:
            ep = core.known_leader_endpoint()
            if ep is not None:
                want[lid] = ep
        for vid, addr in want.items():
            if self.voters.get(vid) != addr:
                self.voters[vid] = addr
                self.transport.set_peer(vid, *addr)
        self.is_voter = core.is_voter
        me = core.voter_info.get(self.node_id)
        if (me is not None and self.listen is not None and self.advertised is not None and core.dynamic
                and (me.host, me.port) != self.advertised and core.leader_id not in (None, self.node_id)
                and core.role is Role.FOLLOWER and (self._updating is None or self._updating.done())):
            self._updating = asyncio.get_running_loop().create_task(self._update_own_endpoint(me))

    async def _update_own_endpoint(self, me: Voter) -> None:
        host, port = self.advertised
        leader = self.voters.get(self.core.leader_id)
        if leader is None:
            return
        icpt = client_interceptors(self.cluster_id or None)
        try:
            async with self.net.grpc_channel(f"{leader[0]}:{leader[1]}", self.channel_credentials, (),
                                             icpt) as ch:
                r = await pb_grpc.RaftQuorumStub(ch).UpdateVoter(pb.UpdateVoterRequest(
                    voter_id=self.node_id, directory_id=me.directory_id, host=host, port=port),
                    timeout=self.timeouts.request_ms / 1000 + 5)
            if r.error == NONE:
                log.info("node %d: the voter set now has this node's listener %s:%d", self.node_id, host, port)
            else:
                log.info("node %d: UpdateRaftVoter refused: %s", self.node_id, r.error_message)
                await asyncio.sleep(1)
        except grpc.aio.AioRpcError as e:
            log.debug("node %d: UpdateRaftVoter failed: %s", self.node_id, e.code())
            await asyncio.sleep(1)

    async def _discover(self) -> list[int]:
        """DescribeQuorum on controller.quorum.bootstrap.servers until one names the leader:
        it is the voter this node fetches from until the log tells it the whole voter set."""
        if not self.bootstrap_servers:
            raise ValueError("no controller.quorum.voters and no controller.quorum.bootstrap.servers: nothing to "
                             "find the metadata quorum with")
        i = 0
        while True:
            host, port = self.bootstrap_servers[i % len(self.bootstrap_servers)]
            i += 1
            try:
                icpt = client_interceptors(self.cluster_id or None)
                async with self.net.grpc_channel(f"{host}:{port}", self.channel_credentials, (), icpt) as ch:
                    r = await pb_grpc.RaftQuorumStub(ch).DescribeQuorum(pb.DescribeQuorumRequest(), timeout=2)
                if r.leader_id >= 0 and r.leader_host:
                    self.voters[r.leader_id] = (r.leader_host, r.leader_port)
                    log.info("node %d: the metadata quorum's leader is %d at %s:%d", self.node_id, r.leader_id,
                             r.leader_host, r.leader_port)
                    return [r.leader_id]
            except grpc.aio.AioRpcError as e:
                log.debug("node %d: bootstrap server %s:%d: %s", self.node_id, host, port, e.code())
            await asyncio.sleep(0.2)

    async def change_voters(self, add: Voter | None = None, remove: tuple[int, str] | None = None,
                            update: Voter | None = None) -> pb.VoterChangeResponse:
        """AddRaftVoter / RemoveRaftVoter on this node: the leader appends the new voter set and
        answers once it is committed; any other node names the leader."""
        core = self.core
        try:
            if add is not None:
                off = core.add_voter(add, self.now_ms())
            elif update is not None:
                off = core.update_voter(update, self.now_ms())
            else:
                off = core.remove_voter(*remove, self.now_ms())
        except NotLeaderError:
            lid = core.leader().leader_id
            host, port = self.voters.get(lid, ("", 0)) if lid is not None else ("", 0)
            return pb.VoterChangeResponse(error=NOT_LEADER, error_message="not the leader",
                                          leader_id=-1 if lid is None else lid, leader_host=host, leader_port=port)
        except VoterChangeError as e:
            return pb.VoterChangeResponse(error=e.code, error_message=e.message, leader_id=self.node_id)
        fut = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(core.epoch, off, fut, self.now_ms()))
        self._wake.set()
        try:
            async with asyncio.timeout(max(self.timeouts.request_ms / 1000, 5.0)):
                await fut
        except TimeoutError:
            return pb.VoterChangeResponse(error=int(ErrorCode.REQUEST_TIMED_OUT), error_message="the new voter set "
                                          "was not committed in time", leader_id=self.node_id)
        except NotLeaderError:
            return pb.VoterChangeResponse(error=NOT_LEADER, error_message="lost the leadership before the change "
                                          "committed", leader_id=-1)
        return pb.VoterChangeResponse(error=NONE, leader_id=self.node_id)

    def voter_endpoints(self) -> list[tuple[int, str, int]]:
        """The current voters and their controller listeners (for the brokers' controller channel)."""
        ids = self.core.voters if self.core is not None else sorted(self.voters)
        return [(v, *self.voters[v]) for v in ids if v in self.voters]

    def _notify(self, notes) -> None:
        for note in notes:
            if isinstance(note, LoadSnapshot):
                self._bytes_since_snapshot = 0
                self._delivered_end = note.snapshot.end_offset
                for lst in self.listeners:
                    lst.handle_load_snapshot(note.snapshot)
                end = note.snapshot.end_offset
                for p in [p for p in self._pending if p.last < end]:
                    self._pending.remove(p)
                    if not p.future.done():  # (a voter change that timed out cancelled its own)
                        p.future.set_exception(NotLeaderError(self._leader))
            elif isinstance(note, Committed):
                batches = self._batches(note)
                if batches:
                    for lst in self.listeners:
                        lst.handle_commit(batches)
                self._bytes_since_snapshot += sum(len(e.data) for e in note.entries)
                self._delivered_end = note.base_offset + len(note.entries)
                self.stats.committed(-1, len(note.entries), self.now_ms())
                self._complete_appends(note)
            elif isinstance(note, LeaderChange):
                self._leader = note.leader
                log.info("node %d: leader is %s in epoch %d", self.node_id, note.leader.leader_id, note.leader.epoch)
                self._held_leader = None
                if note.leader.leader_id == self.node_id and self.core.epoch == note.leader.epoch:
                    self._held_leader = (note.leader, self.core.epoch_start)
                else:
                    for lst in self.listeners:
                        lst.handle_leader_change(note.leader)
            if self._held_leader is not None and self._delivered_end > self._held_leader[1]:
                leader, self._held_leader = self._held_leader[0], None
                log.info("node %d: caught up to the start of epoch %d; announcing leadership", self.node_id,
                         leader.epoch)
                for lst in self.listeners:
                    lst.handle_leader_change(leader)

    @staticmethod
    def _batches(note: Committed) -> list[Batch]:
        out: list[Batch] = []
        cur: list[bytes] = []
        base = key = None
        for i, e in enumerate(note.entries):
            k = (e.epoch, e.timestamp_ms)
            if e.control or k != key:
                if cur:
                    out.append(Batch(base, key[0], key[1], tuple(cur)))
                cur, base, key = [], None, None
            if e.control:
                continue
            if base is None:
                base, key = note.base_offset + i, k
            cur.append(e.data)
        if cur:
            out.append(Batch(base, key[0], key[1], tuple(cur)))
        return out

    def _complete_appends(self, note: Committed) -> None:
        end = note.base_offset + len(note.entries)
        done = [p for p in self._pending if p.last < end]
        for p in done:
            self._pending.remove(p)
            if p.future.done():
                continue
            if p.last >= note.base_offset and note.entries[p.last - note.base_offset].epoch == p.epoch:
                p.future.set_result(p.last)
                self.stats.committed(p.at, 0, self.now_ms())
            else:
                # Another leader's entry was committed at that offset: ours was lost.
                p.future.set_exception(NotLeaderError(self._leader))

    def _maybe_snapshot(self) -> None:
        if self.snapshot_provider is None or self._bytes_since_snapshot < self.max_bytes_between_snapshots:
            return
        core = self.core
        # Not core.applied: commits the core has emitted since may not have reached listeners yet.
        end = self._delivered_end
        if end <= core.log_start:
            return
        records = self.snapshot_provider(end)
        snap = core.take_snapshot(end, records)
        self._bytes_since_snapshot = 0
        log.info("node %d: snapshot at offset %d (%d records); log prefix deleted", self.node_id,
                 snap.end_offset, len(snap.records))

    # ------------------------------------------------------------------ DescribeQuorum
    def _wall(self, t: int) -> int:
        """The wall-clock time of core time ``t`` (as if the wall clock had not stepped since)."""
        return -1 if t < 0 else self.clock.wall_ms() - (self.now_ms() - t)

    def describe_pb(self) -> pb.DescribeQuorumResponse:
        core = self.core
        info = core.describe(self.now_ms()) if core is not None else None
        if info is None:
            lid = core.leader().leader_id if core is not None else None
            host, port = self.voters.get(lid, ("", 0)) if lid is not None else ("", 0)
            return pb.DescribeQuorumResponse(error=NOT_LEADER, leader_id=-1 if lid is None else lid,
                                             leader_epoch=core.epoch if core else 0, high_watermark=-1,
                                             leader_host=host, leader_port=port)

        def rs(r) -> pb.ReplicaState:
            return pb.ReplicaState(replica_id=r.replica_id, log_end_offset=r.log_end_offset,
                                   last_fetch_timestamp=self._wall(r.last_fetch_ms),
                                   last_caught_up_timestamp=self._wall(r.last_caught_up_ms))

        host, port = self.voters.get(info.leader_id, self.advertised or ("", 0))
        return pb.DescribeQuorumResponse(error=NONE, leader_id=info.leader_id, leader_epoch=info.epoch,
                                         high_watermark=info.high_watermark, voters=[rs(v) for v in info.voters],
                                         observers=[rs(o) for o in info.observers], leader_host=host,
                                         leader_port=port, cluster_id=self.cluster_id)

    def snapshot(self) -> Snapshot | None:
        return self.core.snapshot if self.core else None
