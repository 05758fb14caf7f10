"""Partition replication under kill -9 with the Python clients, and truncation of unreplicated
records on a returning ex-leader. Real multi-process clusters on loopback (see conftest.py)."""

from __future__ import annotations

import asyncio
import signal
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.conftest import FAST, Cluster, running_cluster, wait_until


def _admin(c) -> AdminClient:
    return AdminClient({"bootstrap.servers": c.bootstrap})


def _brokers_up(c, a: AdminClient | None = None) -> AdminClient:
    a = a or _admin(c)
    wait_until(lambda: len(a.list_topics(timeout=5).brokers) == c.n_brokers, 90, "all brokers registered")
    return a


def _create(c, name: str, partitions: int = 1, rf: int = 3, config=None) -> None:
    a = _brokers_up(c)
    a.create_topics([NewTopic(name, partitions, rf, config=config or {})])[name].result(30)
    wait_until(lambda: all(p.leader >= 0 and len(p.isrs) == rf for p in
                           a.list_topics(name, timeout=5).topics[name].partitions.values()), 30, "leaders and ISR")


def _partition(c, topic: str, pid: int = 0):
    """The partition as a new client sees it: its broker may learn a topic just created a moment
    after the broker that answered the creation (metadata propagates, as in Kafka)."""
    a = _admin(c)
    found = []
    wait_until(lambda: found.append(a.list_topics(topic, timeout=5).topics[topic].partitions.get(pid)) or found[-1],
               30, f"{topic}-{pid} in a new client's metadata")
    return found[-1]


def _port(c, broker_id: int) -> int:
    return c.base + broker_id - c.n_controllers - 1


def _consume_all(bootstrap: str, topic: str, expected: int, timeout: float = 90) -> list[bytes]:
    """Every record of partition 0 from offset 0, until `expected` records or nothing new for a while."""
    cons = Consumer({"bootstrap.servers": bootstrap, "group.id": "verifier", "enable.auto.commit": False,
                     "enable.partition.eof": True})
    cons.assign([TopicPartition(topic, 0, 0)])
    out: list[bytes] = []
    deadline = time.time() + timeout
    eof_since = None
    while time.time() < deadline:
        for m in cons.consume(1000, 1):
            if m.error() is None:
                out.append(m.value())
                eof_since = None
            elif m.error().code() == -191:  # _PARTITION_EOF
                eof_since = eof_since or time.time()
        if len(out) >= expected and eof_since and time.time() - eof_since > 2:
            break
    cons.close()
    return out


def _run_kill_stream(cluster, topic: str, send, flush) -> tuple[int, list]:
    """Number records 0.. through `send(n)` for 20 s; kill -9 the leader at 3 s, restart it at 10 s."""
    _create(cluster, topic, config={"min.insync.replicas": "2"})
    leader = _partition(cluster, topic).leader
    n = 0
    t0 = time.time()
    killed = restarted = False
    while time.time() - t0 < 20:
        send(n)
        n += 1
        if not killed and time.time() - t0 > 3:
            cluster.kill(cluster.broker_name(leader))
            killed = True
        if killed and not restarted and time.time() - t0 > 10:
            cluster.start(cluster.broker_name(leader))
            restarted = True
    flush()
    return n, leader


def _check_stream(cluster, topic: str, n: int, acked: set, failed: list, leader: int) -> None:
    assert n > 1000, f"only {n} records sent in 20 s"
    assert not failed, failed[:3]
    assert len(acked) == n, f"{n - len(acked)} of {n} sends were not acknowledged"
    values = [int(v) for v in _consume_all(cluster.bootstrap, topic, n)]
    assert values == list(range(n)), "every acknowledged record exactly once, in order, no gaps"
    wait_until(lambda: leader in _partition(cluster, topic).isrs, 90, f"broker {leader} back in the ISR")


# krafty.log.writer.threads: appends written on the event loop (default) or by writer threads
WRITERS = pytest.mark.parametrize("writers", ["0", "2"], ids=["writes-on-loop", "writer-threads"])


@WRITERS
def test_kafka_python_acks_all_stream_survives_leader_kill_and_return(tmp_path, request, writers):
    with running_cluster(tmp_path, request, overrides={**FAST, "krafty.log.writer.threads": writers}) as cluster:
        _kafka_python_kill_stream(cluster)


def _kafka_python_kill_stream(cluster):
    from kafka import KafkaProducer

    _brokers_up(cluster)  # the producer's bootstrap gives up on brokers still starting (load ~30: >10 s)
    p = KafkaProducer(bootstrap_servers=cluster.bootstrap.split(","), acks="all", enable_idempotence=True,
                      linger_ms=2, retries=2**31 - 1, delivery_timeout_ms=120000, request_timeout_ms=30000,
                      max_in_flight_requests_per_connection=5)
    acked: set[int] = set()
    failed: list = []
    lock = threading.Lock()
    pending = []

    def send(n):
        f = p.send("kp-stream", value=str(n).encode())

        def ok(_md, n=n):
            with lock:
                acked.add(n)

        def err(e, n=n):
            with lock:
                failed.append((n, repr(e)))
        f.add_callback(ok)
        f.add_errback(err)
        pending.append(f)
        if len(pending) > 2000:  # keep the buffer bounded on 2 shared cores
            pending.pop(0).get(timeout=120)
        time.sleep(0.001)

    try:
        n, leader = _run_kill_stream(cluster, "kp-stream", send, lambda: p.flush(timeout=180))
    finally:
        p.close(timeout=30)
    _check_stream(cluster, "kp-stream", n, acked, failed, leader)


def test_aiokafka_acks_all_stream_survives_leader_kill_and_return(cluster):
    from aiokafka import AIOKafkaProducer

    acked: set[int] = set()
    failed: list = []
    result: dict = {}

    async def main():
        _create(cluster, "aio-stream", config={"min.insync.replicas": "2"})
        leader = _partition(cluster, "aio-stream").leader
        p = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", enable_idempotence=True,
                             linger_ms=2, request_timeout_ms=30000, retry_backoff_ms=200)
        await p.start()
        futs = []

        def done(f, n):
            if f.cancelled() or f.exception() is not None:
                failed.append((n, repr(f.exception()) if not f.cancelled() else "cancelled"))
            else:
                acked.add(n)
        loop = asyncio.get_running_loop()
        try:
            n = 0
            t0 = time.time()
            killed = restarted = False
            while time.time() - t0 < 20:
                fut = await p.send("aio-stream", value=str(n).encode())
                fut.add_done_callback(lambda f, n=n: done(f, n))
                futs.append(fut)
                n += 1
                await asyncio.sleep(0.001)
                if not killed and time.time() - t0 > 3:
                    await loop.run_in_executor(None, cluster.kill, cluster.broker_name(leader))
                    killed = True
                if killed and not restarted and time.time() - t0 > 10:
                    cluster.start(cluster.broker_name(leader))
                    restarted = True
            await asyncio.wait_for(asyncio.gather(*futs, return_exceptions=True), 180)
        finally:
            await p.stop()
        result.update(n=n, leader=leader)

    asyncio.run(main())
    _check_stream(cluster, "aio-stream", result["n"], acked, failed, result["leader"])


# -- truncation of unreplicated records ------------------------------------------------------

TRUNC = {**FAST, "broker.session.timeout.ms": "6000", "replica.lag.time.max.ms": "30000"}


@pytest.fixture(params=["0", "2"], ids=["writes-on-loop", "writer-threads"])
def trunc_cluster(tmp_path, request):
    c = Cluster(str(tmp_path), overrides={**TRUNC, "krafty.log.writer.threads": request.param})
    c.start()
    try:
        yield c
    finally:
        for p in c.procs.values():  # never leave a stopped process behind
            try:
                p.send_signal(signal.SIGCONT)
            except ProcessLookupError:
                pass
        c.shutdown()
        if getattr(request.node, "failed_call", False):
            for name in c.configs:
                lines = [ln for ln in c.log_text(name).splitlines() if not ln.startswith("%")]
                print(f"---- {name} (last 20 lines) ----")
                print("\n".join(lines[-20:]))


def _produce(bootstrap: str, values: list[bytes], acks: str, timeout: float = 60) -> int:
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "enable.idempotence": acks == "all",
                  "linger.ms": 5, "message.timeout.ms": int(timeout * 1000), "retries": 0 if acks == "1" else 10**6})
    errs: list = []
    for v in values:
        p.produce("trunc", value=v, partition=0, on_delivery=lambda e, m: e and errs.append(e))
        p.poll(0)
    left = p.flush(timeout)
    assert left == 0 and not errs, (left, errs[:3])
    return len(values)


def test_returning_ex_leader_truncates_its_unreplicated_records(trunc_cluster):
    c = trunc_cluster
    _create(c, "trunc", config={"min.insync.replicas": "2"})
    part = _partition(c, "trunc")
    old = part.leader
    followers = [b for b in part.replicas if b != old]
    assert part.replicas[0] == old, "the first leader is the preferred replica"

    before = [f"committed-{i}".encode() for i in range(200)]
    _produce(c.bootstrap, before, "all")
    # let both followers fetch everything, and let their last fetch requests be answered
    wait_until(lambda: len(_consume_all(c.bootstrap, "trunc", 200, timeout=20)) == 200, 60, "committed data")
    time.sleep(1.5)

    for f in followers:
        c.procs[c.broker_name(f)].send_signal(signal.SIGSTOP)
    try:
        time.sleep(0.8)  # any follower fetch parked in the leader's purgatory times out (fetch wait 500 ms)
        lost = [f"unreplicated-{i}".encode() for i in range(50)]
        _produce(f"127.0.0.1:{_port(c, old)}", lost, "1", timeout=10)
        c.kill(c.broker_name(old))
    finally:
        for f in followers:
            c.procs[c.broker_name(f)].send_signal(signal.SIGCONT)

    new = wait_until(lambda: (lambda p: p.leader if p.leader in followers else None)(_partition(c, "trunc")),
                     90, "a new leader among the followers")
    after = [f"after-{i}".encode() for i in range(100)]
    _produce(c.bootstrap, after, "all")
    on_new = _consume_all(f"127.0.0.1:{_port(c, new)}", "trunc", 300)
    assert on_new == before + after, "the new leader has the committed records and not the acks=1 ones"

    c.start(c.broker_name(old))
    wait_until(lambda: old in _partition(c, "trunc").isrs, 120, f"broker {old} back in the ISR")
    # the preferred-leader check (every 5 s) hands leadership back to the returning broker
    wait_until(lambda: _partition(c, "trunc").leader == old, 120, f"broker {old} preferred leader again")
    on_old = _consume_all(f"127.0.0.1:{_port(c, old)}", "trunc", 300)
    assert on_old == on_new, "the old leader's log is identical to the new leader's"
    assert not any(v.startswith(b"unreplicated-") for v in on_old)

    # and it keeps replicating from here on: one more acks=all batch, readable from the old leader
    _produce(c.bootstrap, [b"final"], "all")
    assert _consume_all(c.bootstrap, "trunc", 301)[-1] == b"final"
    # the returning broker said so: OffsetForLeaderEpoch told it where its epoch ends (250 -> 200)
    assert "trunc-0: truncating from 250 to 200" in c.log_text(c.broker_name(old))


# -- KIP-392: fetch from the closest replica ---------------------------------------------------

RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


@pytest.fixture
def rack_cluster(tmp_path, request):
    with running_cluster(tmp_path, request, racks=["a", "b", "c"],
                         overrides={**FAST, "replica.selector.class": RACK_AWARE}) as c:
        yield c


class _RackConsumer:
    """A confluent-kafka consumer with client.rack that remembers which broker fetches its partition
    (librdkafka's statistics: the broker thread that holds the toppar)."""

    def __init__(self, bootstrap: str, topic: str, rack: str | None):
        import json
        self.fetch_brokers: list[int] = []

        def stats(s):
            for b in json.loads(s)["brokers"].values():
                if any(tp.get("topic") == topic for tp in b.get("toppars", {}).values()):
                    self.fetch_brokers.append(b["nodeid"])
        conf = {"bootstrap.servers": bootstrap, "group.id": f"rack-{rack}", "enable.auto.commit": False,
                "statistics.interval.ms": 200, "stats_cb": stats, "topic.metadata.refresh.interval.ms": 2000}
        if rack:
            conf["client.rack"] = rack
        self.c = Consumer(conf)
        self.c.assign([TopicPartition(topic, 0, 0)])
        self.values: list[bytes] = []

    def read_until(self, n: int, timeout: float = 60) -> list[bytes]:
        deadline = time.time() + timeout
        while len(self.values) < n and time.time() < deadline:
            for m in self.c.consume(500, 0.5):
                if m.error() is None:
                    self.values.append(m.value())
        self.c.poll(0.5)  # one more statistics callback
        return self.values

    def close(self):
        self.c.close()


def test_consumer_with_a_rack_fetches_from_the_in_sync_follower_in_its_rack(rack_cluster):
    c = rack_cluster
    _create(c, "racky", config={"min.insync.replicas": "2"})
    part = _partition(c, "racky")
    brokers = _admin(c).list_topics(timeout=5).brokers
    rack_of = {b: c.configs[c.broker_name(b)]["broker.rack"] for b in brokers}
    leader = part.leader
    follower = next(r for r in part.replicas if r != leader)
    assert rack_of[follower] != rack_of[leader]

    first = [f"r-{i}".encode() for i in range(500)]
    _produce_to(c, "racky", first)
    near = _RackConsumer(c.bootstrap, "racky", rack_of[follower])
    home = _RackConsumer(c.bootstrap, "racky", rack_of[leader])
    try:
        assert near.read_until(500) == first
        # more data while it reads from the follower: bounded by, and following, the follower's HW
        second = [f"s-{i}".encode() for i in range(500, 1000)]
        _produce_to(c, "racky", second)
        assert near.read_until(1000) == first + second, "all the data, in order, from the follower"
        wait_until(lambda: near.fetch_brokers and near.fetch_brokers[-1] == follower, 30,
                   f"the rack-{rack_of[follower]} consumer fetching from broker {follower}")
        assert home.read_until(1000) == first + second
        wait_until(lambda: home.fetch_brokers and home.fetch_brokers[-1] == leader, 30,
                   f"the rack-{rack_of[leader]} consumer fetching from the leader {leader}")
    finally:
        near.close()
        home.close()


def _produce_to(c, topic: str, values: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    errs: list = []
    for v in values:
        p.produce(topic, value=v, partition=0, on_delivery=lambda e, m: e and errs.append(e))
        p.poll(0)
    assert p.flush(60) == 0 and not errs, errs[:3]


def test_rack_aware_selector_rules():
    from broker.replica.selector import (
        RACK_AWARE_SELECTOR,
        LeaderSelector,
        RackAwareReplicaSelector,
        candidates_for,
        make_selector,
    )
    assert make_selector(None) is None
    assert isinstance(make_selector(RACK_AWARE_SELECTOR), RackAwareReplicaSelector)
    assert isinstance(make_selector("org.apache.kafka.common.replica.LeaderSelector"), LeaderSelector)
    with pytest.raises(ValueError):
        make_selector("com.example.Nope")
    racks = {4: "a", 5: "b", 6: "b", 7: "c"}
    sel = RackAwareReplicaSelector()
    # in-sync followers in rack b that hold the fetch offset; the most caught up wins
    leader, cands = candidates_for(100, (4, 5, 6), {5: 120, 6: 130}, racks, 4, 140)
    assert sel.select("b", leader, cands) == 6
    assert sel.select("a", leader, cands) == 4  # the leader is in the client's rack
    assert sel.select(None, leader, cands) == 4
    assert sel.select("c", leader, cands) == 4  # broker 7 is not a replica
    # not in the ISR, or not yet at the fetch offset: not a candidate
    leader, cands = candidates_for(125, (4, 5), {5: 120, 6: 130}, racks, 4, 140)
    assert sel.select("b", leader, cands) == 4
    # fenced brokers are left out of `racks` by the caller
    leader, cands = candidates_for(100, (4, 5, 6), {5: 120, 6: 130}, {4: "a", 5: "b"}, 4, 140)
    assert sel.select("b", leader, cands) == 5


def _seconds_until_followers_know_a_new_high_watermark(tmp_path, **overrides) -> float:
    """Produces one record (acks=all) once the followers' fetches sit in their long polls
    (replica.fetch.wait.max.ms = 5 s, no other traffic); the seconds from the ack until both
    followers answer it with the new high watermark."""
    from broker.protocol.apis import ApiKey
    from broker.protocol.client import KafkaConnection

    c = Cluster(str(tmp_path), overrides={**FAST, "replica.fetch.wait.max.ms": "5000", **overrides})
    c.start()
    try:
        _create(c, "hwprop")
        time.sleep(6)  # let the followers' fetches settle into their long polls
        reg = _partition(c, "hwprop")
        followers = [b for b in reg.replicas if b != reg.leader]
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
        p.produce("hwprop", b"x", partition=0)
        assert p.flush(30) == 0
        acked = time.monotonic()

        async def follower_hw(broker_id: int) -> int:
            conn = KafkaConnection("127.0.0.1", _port(c, broker_id))
            try:
                resp = await conn.request(ApiKey.FETCH, 12, {
                    "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1024, "isolation_level": 0,
                    "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
                    "topics": [{"topic": "hwprop", "partitions": [{
                        "partition": 0, "fetch_offset": 0, "partition_max_bytes": 1024, "log_start_offset": -1,
                        "current_leader_epoch": -1, "last_fetched_epoch": -1}]}]})
                return resp.responses[0].partitions[0].high_watermark
            finally:
                conn.close()

        def all_know() -> bool:
            return all(asyncio.run(follower_hw(b)) == 1 for b in followers)

        wait_until(all_know, 30, "followers know the new high watermark")
        return time.monotonic() - acked
    finally:
        c.shutdown()


def test_followers_learn_a_new_high_watermark_without_waiting_out_the_long_poll(tmp_path):
    """With a replica selector (consumers read from followers, KIP-392) the leader ends a
    follower's long poll when the watermark is news to it (tracked by the fetch session), so
    followers and the consumers reading from them see it at once, not when the poll times out."""
    from broker.replica.selector import RACK_AWARE_SELECTOR

    took = _seconds_until_followers_know_a_new_high_watermark(tmp_path, **{"replica.selector.class": RACK_AWARE_SELECTOR})
    assert took < 2.5, f"followers learned the high watermark {took:.2f} s after the ack"


def test_without_a_replica_selector_followers_learn_a_new_high_watermark_within_the_delay(tmp_path):
    """Without a replica selector a high watermark that only advanced ends a follower's long poll
    FOLLOWER_HW_DELAY_S later (records coming first carry it: one fetch round per append of a
    busy partition instead of two, issue 19), still not a whole replica.fetch.wait.max.ms later
    (issue 24: followers learn the watermark without waiting out the long poll)."""
    took = _seconds_until_followers_know_a_new_high_watermark(tmp_path)
    assert took < 2.5, f"followers learned the high watermark {took:.2f} s after the ack"
