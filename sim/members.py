"""KIP-848 consumer-protocol members and KIP-932 share consumers in the whole-cluster worlds
(sim/scenario.py), written against the wire protocol over sim/client.py's connections, as the
other simulated clients are. Each joins, leaves and crashes on the seed's schedule; brokers and
coordinators under them are killed, paused and cut off by the world's faults.

``ConsumerMember`` (group ``sim-consumers``): ConsumerGroupHeartbeat v1 with its member epoch and
owned partitions; on a new assignment it first revokes what it lost (commits its position with
OffsetCommit v9 and its member epoch, then stops fetching: the next heartbeat acknowledges it),
then takes what it gained at the committed offset (OffsetFetch); between heartbeats it fetches
from its partitions and commits. FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID: everything is lost (no
commit) and it joins again at epoch 0. Checked as events happen:

* no partition is owned by two members at once: when a member takes a partition (its heartbeat
  answer gave it), no other member that the group coordinator counts as a member believes it owns
  it (a member the coordinator fenced, and that does not know yet, does not count: its commits
  are refused);
* committed offsets never go back: a member taking a partition finds its committed offset at
  least the last commit any member had acknowledged;
* within one ownership session a member is given the partition's offsets one after the other
  from the committed offset it started at: none skipped, none repeated (a repeat across sessions
  is what a commit that came too late allows);
* every record a member was given is, at the end, in the log at that offset (``check_final``).

``ShareConsumer`` (share group ``sim-share``): ShareGroupHeartbeat v1, and ShareFetch v1 to the
leaders of its assigned partitions in a share session per leader, acknowledging the records of
the last answer in the next ShareFetch (ACCEPT, RELEASE or REJECT, drawn from the seed; after
healing, new consumers ACCEPT everything); a crash holds its records until their acquisition locks expire.
Checked as answers come:

* a record is never acquired by two consumers at once while its lock holds: a delivery of a record
  that another consumer acquired less than the lock duration before, from the same leader
  incarnation and leader epoch (a new leader loads the persisted state, where acquired records
  are available again, as in Kafka), and has not acknowledged or given back since, is a violation;
* a record whose ACCEPT (or REJECT) was answered is never delivered again, across failovers;
* no delivery count exceeds ``group.share.delivery.count.limit``;
* after healing every record of the log is acknowledged or archived: each partition's share
  start offset reaches its high watermark (DescribeShareGroupOffsets), within the liveness bound.
"""

from __future__ import annotations

import asyncio
import uuid

from broker.log.batch import iter_records, parse_batches
from broker.protocol.apis import ApiKey
from common.errors import ErrorCode
from sim.client import RETRIABLE, Cluster, _GroupClient, read_partition

CONSUMER_GROUP = "sim-consumers"
SHARE_GROUP = "sim-share"
# the world's group settings (World.config): short sessions and locks, to fit seconds of faults
SESSION_MS, HEARTBEAT_MS, LOCK_MS = 3000, 500, 2000
GROUP_CONFIG = {
    "group.consumer.session.timeout.ms": SESSION_MS, "group.consumer.min.session.timeout.ms": 1000,
    "group.consumer.heartbeat.interval.ms": HEARTBEAT_MS, "group.consumer.min.heartbeat.interval.ms": 100,
    "group.share.session.timeout.ms": SESSION_MS, "group.share.min.session.timeout.ms": 1000,
    "group.share.heartbeat.interval.ms": HEARTBEAT_MS, "group.share.min.heartbeat.interval.ms": 100,
    "group.share.record.lock.duration.ms": LOCK_MS, "group.share.min.record.lock.duration.ms": 1000,
    "share.coordinator.state.topic.num.partitions": 3,
}
FENCED = {ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID}
ACCEPT, RELEASE, REJECT = 1, 2, 3


def coordinator_members(world, group: str) -> set[str] | None:
    """The member ids of ``group`` as the coordinator that leads its ``__consumer_offsets``
    partition now (in the active controller's image) has them; None: no such coordinator loaded."""
    c = world.active_controller()
    if c is None:
        return None
    t = world.node(c).loader.image.topics_by_name.get("__consumer_offsets")
    for nid in world.broker_ids:
        n = world.node(nid)
        if n is None or n.broker is None or t is None:
            continue
        gc = n.broker.apis.group_coordinator
        reg = t.partitions.get(gc.partition_for(group))
        if reg is None or reg.leader != nid:
            continue
        try:
            shard = gc.shard_for(group)
        except Exception:  # noqa: BLE001 - not loaded (yet): no answer
            return None
        g = shard.consumer_groups.get(group)
        return set(g.members) if g is not None else set()
    return None


class ConsumerMember(_GroupClient):
    """A consumer with ``group.protocol=consumer`` (see the module's doc)."""

    def __init__(self, world, name: str, topic: str, partitions: int, book: dict):
        self.world, self.name, self.topic, self.partitions = world, name, topic, partitions
        self.group = CONSUMER_GROUP
        self.cl = Cluster(world, name)
        self.coordinator: int | None = None
        self.book = book  # shared by the group's members: "members", "acked", "seen"
        book.setdefault("members", [])
        book.setdefault("acked", [-1] * partitions)
        book.setdefault("seen", {})
        book.setdefault("sessions", 0)
        book["members"].append(self)
        self.alive = True
        self.incarnation = 0
        self._new_member()

    def _new_member(self) -> None:
        self.incarnation += 1
        self.member_id = f"{self.name}.{self.incarnation}-{uuid.UUID(int=self.cl.rng.getrandbits(128)).hex[:12]}"
        self.epoch = 0
        self.full = True
        self.owned: set[int] = set()
        self.pos: dict[int, int] = {}  # next offset to consume of each owned partition

    # --- the heartbeat and reconciliation ------------------------------------------------------------
    async def _topic_id(self) -> uuid.UUID | None:
        tid = self.cl.topic_ids.get(self.topic)
        if tid is None:
            await self.cl.refresh(self.topic)
            tid = self.cl.topic_ids.get(self.topic)
        return tid

    async def _heartbeat(self, leaving: bool = False) -> ErrorCode | None:
        tid = await self._topic_id()
        if tid is None:
            return None
        full = self.full
        r = await self._call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, {
            "group_id": self.group, "member_id": self.member_id, "member_epoch": -1 if leaving else self.epoch,
            "instance_id": None, "rack_id": None, "rebalance_timeout": 3000 if full else -1,
            "subscribed_topic_names": [self.topic] if full else None, "subscribed_topic_regex": None,
            "server_assignor": None,
            "topic_partitions": [] if self.epoch == 0 else [{"topic_id": tid, "partitions": sorted(self.owned)}]})
        if r is None:
            self.full = True  # (Kafka's client sends everything again after a failed heartbeat)
            return None
        code = ErrorCode(int(r.error_code))
        if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
            self.coordinator = None
        if leaving or code != ErrorCode.NONE:
            if code in FENCED:
                self._lose_all()
            elif code != ErrorCode.NONE:
                self.full = True
            return code
        self.epoch, self.full = int(r.member_epoch), False
        if r.assignment is not None:
            target = {int(p) for tp in r.assignment.topic_partitions if tp.topic_id == tid for p in tp.partitions}
            await self._reconcile(target)
        return code

    def _lose_all(self) -> None:
        """Fenced: the partitions are lost, not revoked (nothing is committed), and it joins again."""
        self.world.note(f"{self.name}: fenced in epoch {self.epoch}, loses {sorted(self.owned)}")
        self.owned, self.pos = set(), {}
        self.epoch, self.full = 0, True

    async def _reconcile(self, target: set[int]) -> None:
        revoked, added = self.owned - target, target - self.owned
        if revoked:
            # onPartitionsRevoked: the records in hand are processed first (a while), then committed
            await asyncio.sleep(self.cl.rng.random() * 0.3)
            await self._commit(revoked)
            self.owned -= revoked
            for p in revoked:
                self.pos.pop(p, None)
        if added:
            self._check_exclusive(added)
            if await self._take(added):
                self.owned |= added
            else:
                self.full = True  # taken again on the next (full) heartbeat's answer

    def _check_exclusive(self, added: set[int]) -> None:
        members = coordinator_members(self.world, self.group)
        if members is None or self.world.durability_excused():
            return
        for other in self.book["members"]:
            if other is self or not other.alive or other.member_id not in members:
                continue
            both = other.owned & added
            if both:
                raise self.world.violation(
                    f"{self.name} ({self.member_id}, epoch {self.epoch}) was given partitions {sorted(both)} of "
                    f"{self.topic} that {other.name} ({other.member_id}, epoch {other.epoch}), a member of the group, "
                    f"still owns")

    async def _take(self, added: set[int]) -> bool:
        """OffsetFetch of the partitions taken: where each ownership session starts."""
        floor = list(self.book["acked"])
        r = await self._call(ApiKey.OFFSET_FETCH, 7, {"group_id": self.group, "require_stable": False, "topics": [
            {"name": self.topic, "partition_indexes": sorted(added)}]})
        if r is None or int(r.error_code) or any(int(pr.error_code) for pr in r.topics[0].partitions):
            if r is not None:
                self.coordinator = None
            return False
        for pr in r.topics[0].partitions:
            p, off = int(pr.partition_index), int(pr.committed_offset)
            if off < floor[p] and not self.world.durability_excused():
                raise self.world.violation(f"{self.name} took partition {p} of the consumer group over at committed "
                                           f"offset {off}, below the last acknowledged commit {floor[p]}")
            self.pos[p] = max(off, 0)
        self.book["sessions"] += len(added)
        return True

    # --- consuming and committing -----------------------------------------------------------------------
    async def _consume(self) -> None:
        for p in sorted(self.owned):
            got = await read_partition(self.cl, self.topic, p, self.pos[p], max_wait_ms=50)
            if got is None or p not in self.owned:
                continue  # (revoked or lost meanwhile: what was read is dropped)
            seen = self.book["seen"]
            for off, value in got[1]:
                if off < self.pos[p]:
                    continue
                if off > self.pos[p] and not self.world.durability_excused():
                    raise self.world.violation(f"{self.name} skipped offsets {self.pos[p]}..{off - 1} of partition "
                                               f"{p} within its ownership session")
                seen.setdefault((p, off), set()).add(value)
                self.pos[p] = off + 1

    async def _commit(self, parts) -> bool:
        offs = {p: self.pos[p] for p in parts if p in self.pos}
        if not offs:
            return True
        r = await self._call(ApiKey.OFFSET_COMMIT, 9, {
            "group_id": self.group, "generation_id_or_member_epoch": self.epoch, "member_id": self.member_id,
            "group_instance_id": None, "topics": [{"name": self.topic, "partitions": [
                {"partition_index": p, "committed_offset": off, "committed_leader_epoch": -1,
                 "committed_metadata": None} for p, off in sorted(offs.items())]}]})
        if r is None:
            return False
        ok = True
        acked = self.book["acked"]
        for pr in r.topics[0].partitions:
            code = ErrorCode(int(pr.error_code))
            p = int(pr.partition_index)
            if code == ErrorCode.NONE:
                acked[p] = max(acked[p], offs[p])
            else:
                ok = False
                if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
                    self.coordinator = None
        return ok

    # --- the life of the consumer ------------------------------------------------------------------------
    async def run(self, until: float) -> None:
        loop = asyncio.get_running_loop()
        rng = self.cl.rng
        last_hb = -1.0
        while loop.time() < until:
            if self.epoch == 0 or loop.time() - last_hb >= HEARTBEAT_MS / 1000:
                last_hb = loop.time()
                code = await self._heartbeat()
                if code is None or (code != ErrorCode.NONE and code not in FENCED):
                    await asyncio.sleep(0.05 + rng.random() * 0.1)
                    continue
            if self.owned:
                await self._consume()
                if rng.random() < 0.3:
                    await self._commit(self.owned)
            else:
                await asyncio.sleep(0.05)
            roll = rng.random()
            if roll < 0.01:  # a graceful close: commit, leave (epoch -1), then a new consumer joins
                await self._commit(self.owned)
                await self._heartbeat(leaving=True)
                self.world.note(f"{self.name}: leaves the consumer group ({self.member_id})")
                self._new_member()
            elif roll < 0.02:  # a crash: nothing more from this process; a new one starts later
                self.world.note(f"{self.name}: crashes holding {sorted(self.owned)} ({self.member_id})")
                self.alive = False
                await asyncio.sleep(0.5 + rng.random() * 3)
                self.cl.close()
                self._new_member()
                self.alive = True
        # the end: everything processed is committed, and the member leaves
        end = loop.time() + 20
        while self.owned and not await self._commit(self.owned) and loop.time() < end:
            await asyncio.sleep(0.1)
        await self._heartbeat(leaving=True)


def check_consumed(world, book: dict, logs: dict[int, dict[int, bytes]]) -> None:
    """Every record a consumer-protocol member was given is in the log, at that offset."""
    for (p, off), values in book.get("seen", {}).items():
        if values != {logs[p].get(off)}:
            raise world.violation(f"a consumer-group member was given {sorted(values)} at {p}/{off}; the log has "
                                  f"{logs[p].get(off)!r}")
    world.note(f"consumer group: {book.get('sessions', 0)} ownership sessions, {len(book.get('seen', {}))} records "
               f"consumed, last commits acknowledged {book.get('acked')}")


# --- share groups (KIP-932) --------------------------------------------------------------------------------

class ShareConsumer(_GroupClient):
    """A share consumer (see the module's doc). ``book`` is shared by the group's consumers:
    "holds" (partition, offset) -> (member id, name, leader key, request sent at: acquired no
    earlier) of records acquired and not given back, "done" the (partition, offset) whose ACCEPT
    or REJECT was answered."""

    def __init__(self, world, name: str, topic: str, book: dict, limit: int):
        self.world, self.name, self.topic = world, name, topic
        self.group = SHARE_GROUP
        self.cl = Cluster(world, name)
        self.coordinator: int | None = None
        self.book = book
        book.setdefault("holds", {})
        book.setdefault("done", set())
        book.setdefault("deliveries", 0)
        self.limit = limit
        self.drain = False  # after the faults: ACCEPT everything
        self.incarnation = 0
        self._new_member()

    def _new_member(self) -> None:
        self.incarnation += 1
        self.member_id = f"{self.name}.{self.incarnation}-{uuid.UUID(int=self.cl.rng.getrandbits(128)).hex[:12]}"
        self.epoch = 0
        self.assigned: set[int] = set()
        self.sessions: dict[int, int] = {}  # leader -> share session epoch
        self.pending: dict[int, list[tuple[int, int]]] = {}  # partition -> acquired (offset, delivery count)

    async def _heartbeat(self, leaving: bool = False) -> ErrorCode | None:
        r = await self._call(ApiKey.SHARE_GROUP_HEARTBEAT, 1, {
            "group_id": self.group, "member_id": self.member_id, "member_epoch": -1 if leaving else self.epoch,
            "rack_id": None, "subscribed_topic_names": [self.topic] if self.epoch == 0 else None})
        if r is None:
            return None
        code = ErrorCode(int(r.error_code))
        if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
            self.coordinator = None
        if code in FENCED:
            self.epoch, self.assigned = 0, set()
        if code != ErrorCode.NONE or leaving:
            return code
        self.epoch = int(r.member_epoch)
        if r.assignment is not None:
            tid = self.cl.topic_ids.get(self.topic)
            self.assigned = {int(p) for tp in r.assignment.topic_partitions if tp.topic_id == tid
                             for p in tp.partitions}
        return code

    def _leader_key(self, broker: int, p: int):
        """(process, leader epoch, loaded share partition) of ``broker`` as the leader of partition
        ``p`` now, or None: the records one of them acquired are locked as long as it lasts (a new
        leader, or the share partition loaded again, starts from the persisted state, where
        acquired records are available)."""
        proc = self.world.procs.get(broker)
        n = self.world.node(broker)
        part = n.broker.replicas.partitions.get((self.topic, p)) if n is not None and n.broker else None
        if part is None or not part.state.is_leader:
            return None
        sh = n.broker.apis.share_apis.manager.partitions.get((self.group, self.topic, p))
        return None if sh is None else (proc.owner, part.state.leader_epoch, sh)

    def _choose(self) -> int:
        if self.drain:
            return ACCEPT
        roll = self.cl.rng.random()
        return ACCEPT if roll < 0.7 else RELEASE if roll < 0.9 else REJECT

    async def _fetch_from(self, leader: int, parts: list[int], tid: uuid.UUID) -> None:
        loop = asyncio.get_running_loop()
        epoch = self.sessions.get(leader, 0)
        acks: dict[int, list[tuple[int, int]]] = {}  # partition -> [(offset, type)]
        if epoch > 0:
            for p in parts:
                acks[p] = [(off, self._choose()) for off, _ in self.pending.pop(p, [])]
        holds, done = self.book["holds"], self.book["done"]
        sent = loop.time()
        for p, offs in acks.items():  # given back or settled from now on, whatever the answer
            for off, _ in offs:
                h = holds.get((p, off))
                if h is not None and h[0] == self.member_id:
                    del holds[(p, off)]
        if epoch == 0:  # a new share session replaces the member's old one there, which gives its records back
            owner = self.world.procs[leader].owner
            for k in [k for k, h in holds.items() if h[0] == self.member_id and h[2] is not None and h[2][0] == owner]:
                del holds[k]
            for p in parts:
                self.pending.pop(p, None)
        keys = {p: self._leader_key(leader, p) for p in parts}
        try:
            r = await self.cl.request(leader, ApiKey.SHARE_FETCH, 1, {
                "group_id": self.group, "member_id": self.member_id, "share_session_epoch": epoch,
                "max_wait": 100, "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 20, "batch_size": 20,
                "topics": [{"topic_id": tid, "partitions": [
                    {"partition_index": p, "acknowledgement_batches": [
                        {"first_offset": off, "last_offset": off, "acknowledge_types": [t]} for off, t in acks.get(p, [])]}
                    for p in parts]}], "forgotten_topics_data": []})
        except (ConnectionError, TimeoutError, OSError):
            self.sessions.pop(leader, None)
            return
        code = ErrorCode(int(r.error_code))
        if code != ErrorCode.NONE:
            self.sessions.pop(leader, None)  # (INVALID_SHARE_SESSION_EPOCH, SHARE_SESSION_NOT_FOUND: a new one)
            return
        self.sessions[leader] = epoch + 1 if epoch < 2**31 - 1 else 1
        for t in r.responses:
            for pd in t.partitions:
                p = int(pd.partition_index)
                if int(pd.acknowledge_error_code) == 0 and int(pd.error_code) == 0:
                    for off, typ in acks.get(p, []):
                        if typ in (ACCEPT, REJECT):
                            done.add((p, off))
                if int(pd.error_code):
                    if ErrorCode(int(pd.error_code)) in RETRIABLE:
                        self.cl.leaders.pop((self.topic, p), None)
                    continue
                self._delivered(p, pd, sent, keys.get(p), self._leader_key(leader, p))

    def _delivered(self, p: int, pd, sent: float, key_then, key_now) -> None:
        w = self.world
        now = asyncio.get_running_loop().time()
        holds, done = self.book["holds"], self.book["done"]
        counts = {}
        for a in pd.acquired_records:
            for off in range(int(a.first_offset), int(a.last_offset) + 1):
                counts[off] = int(a.delivery_count)
        data = bytes(pd.records or b"")
        got = []
        for h in parse_batches(data):
            got += [rec.offset for rec in iter_records(memoryview(data)[h.pos:h.pos + h.size]) if rec.offset in counts]
        excused = w.durability_excused()
        certain = key_then is not None and key_then == key_now  # acquired by this leader in this epoch
        for off in got:
            self.book["deliveries"] += 1
            if counts[off] > self.limit and not excused:
                raise w.violation(f"{self.name} was given {p}/{off} of share group {self.group} with delivery count "
                                  f"{counts[off]}, above the limit {self.limit}")
            if (p, off) in done and not excused:
                raise w.violation(f"{self.name} was given {p}/{off} of share group {self.group} again after its "
                                  f"acknowledgement (ACCEPT or REJECT) was answered")
            h = holds.get((p, off))
            if h is not None and certain and h[2] == key_now and now - h[3] < LOCK_MS / 1000 and not excused:
                raise w.violation(f"{self.name} ({self.member_id}) acquired {p}/{off} of share group {self.group} while "
                                  f"{h[1]} ({h[0]}) held it (acquired at {h[3] - 1000:.3f} s or later, lock "
                                  f"{LOCK_MS} ms, leader {key_now[:2]})")
            holds[(p, off)] = (self.member_id, self.name, key_now if certain else None, sent)
            self.pending.setdefault(p, []).append((off, counts[off]))

    async def run(self, until: float, stop=None) -> None:
        """Consumes until ``until`` (or ``stop()``), crashing now and then, and leaves."""
        loop = asyncio.get_running_loop()
        rng = self.cl.rng
        last_hb = -1.0
        while loop.time() < until and not (stop is not None and stop()):
            if self.epoch == 0 or loop.time() - last_hb >= HEARTBEAT_MS / 1000:
                last_hb = loop.time()
                if self.topic not in self.cl.topic_ids:
                    await self.cl.refresh(self.topic)
                code = await self._heartbeat()
                if code is None or code != ErrorCode.NONE:
                    await asyncio.sleep(0.05 + rng.random() * 0.1)
                    continue
            tid = self.cl.topic_ids.get(self.topic)
            by_leader: dict[int, list[int]] = {}
            for p in sorted(self.assigned | set(self.pending)):
                leader = await self.cl.leader_of((self.topic, p))
                if leader is not None:
                    by_leader.setdefault(leader, []).append(p)
            for leader, parts in sorted(by_leader.items()):
                await self._fetch_from(leader, parts, tid)
            if not by_leader:
                await asyncio.sleep(0.05)
            if not self.drain and rng.random() < 0.01:
                # a crash: its records stay acquired until their locks expire; a new consumer later
                self.world.note(f"{self.name}: crashes holding {sum(map(len, self.pending.values()))} records")
                self.cl.close()
                await asyncio.sleep(0.5 + rng.random() * 3)
                self._new_member()
        await self._heartbeat(leaving=True)


async def share_drained(world, cl: Cluster, topic: str, partitions: int) -> bool:
    """Each partition's share start offset has reached its high watermark (DescribeShareGroupOffsets
    v1 through the group's coordinator, the high watermarks from the leaders)."""
    coord = await cl.find_coordinator(SHARE_GROUP, 0)
    if coord is None:
        return False
    try:
        r = await cl.request(coord, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1, {
            "groups": [{"group_id": SHARE_GROUP, "topics": [{"topic_name": topic,
                                                             "partitions": list(range(partitions))}]}]})
    except (ConnectionError, TimeoutError, OSError):
        return False
    g = r.groups[0]
    if int(g.error_code) or not g.topics:
        return False
    starts = {int(po.partition_index): int(po.start_offset) for po in g.topics[0].partitions if not int(po.error_code)}
    for p in range(partitions):
        got = await read_partition(cl, topic, p, 0, max_wait_ms=0)
        if got is None or p not in starts or starts[p] < got[0]:
            return False
    return True


# the fractions of seeds that run consumer-protocol members and share consumers (each costs the seeds
# that run it ~20-30% more CPU)
CONSUMER_SEEDS = 0.3
SHARE_SEEDS = 0.3


def delivery_limit(seed: int) -> int:
    """The world's group.share.delivery.count.limit (2..5, by seed)."""
    return 2 + seed % 4


class GroupWorkload:
    """The consumer-protocol members and share consumers of one world: as ``Settings.groups`` says,
    or on the seeds that draw them (``w.rng_for("groups")``: the world's other draws stay as they were)."""

    def __init__(self, w, topic: str, partitions: int):
        rng = w.rng_for("groups")
        self.w, self.topic, self.partitions = w, topic, partitions
        self.book: dict = {}
        self.share_book: dict = {}
        kinds = w.settings.groups
        drawn = rng.random() < CONSUMER_SEEDS
        self.members = [ConsumerMember(w, f"cmember-{i}", topic, partitions, self.book)
                        for i in range(rng.randint(2, 3))] if (
            drawn if kinds is None else kinds in ("consumer", "both")) else []
        drawn = rng.random() < SHARE_SEEDS
        limit = delivery_limit(w.seed)
        self.share = [ShareConsumer(w, f"share-{i}", topic, self.share_book, limit)
                      for i in range(rng.randint(2, 3))] if (drawn if kinds is None else kinds in ("share", "both")) else []

    def tasks(self, until: float) -> list[asyncio.Task]:
        return [self.w.spawn(c.name, c.run(until)) for c in self.members + self.share]

    def finish(self, logs: dict[int, dict[int, bytes]] | None, liveness_s: float) -> None:
        """After healing: the records consumer-protocol members were given are the log's; share
        consumers that accept everything bring every share partition's start to its high watermark."""
        w = self.w
        if self.members and logs is not None:
            check_consumed(w, self.book, logs)
        if not self.share:
            return
        book = self.share_book
        book["drained"] = False
        cl = Cluster(w, "share-verifier")

        async def poll() -> None:
            while not await share_drained(w, cl, self.topic, self.partitions):
                await asyncio.sleep(0.25)
            book["drained"] = True
        drainers = [ShareConsumer(w, f"share-drain-{i}", self.topic, book, self.share[0].limit) for i in range(2)]
        for d in drainers:
            d.drain = True
        end = w.loop.time() + liveness_s
        tasks = [w.spawn(d.name, d.run(end, lambda: book["drained"])) for d in drainers]
        t = w.spawn("share-verifier", poll())

        def failed() -> bool:
            return any(x.done() and not x.cancelled() and x.exception() is not None for x in tasks)
        done = w.run_for(liveness_s, lambda: t.done() or failed())
        for x in tasks:
            if x.done() and not x.cancelled() and x.exception() is not None:
                raise x.exception()
        if not done:
            if w.durability_excused():
                w.note("power lost on brokers: share-group state not checked for liveness")
                return
            raise w.violation(f"share group {SHARE_GROUP}: records of {self.topic} still neither acknowledged nor "
                              f"archived {liveness_s} s after healing (a share start offset below the high watermark)")
        t.result()
        w.run_for(5, lambda: all(x.done() for x in tasks))
        w.note(f"share group: {book.get('deliveries', 0)} deliveries, {len(book.get('done', ()))} acknowledged "
               f"(ACCEPT/REJECT), delivery limit {self.share[0].limit}")
