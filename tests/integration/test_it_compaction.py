"""Log compaction of a user topic (cleanup.policy=compact) seen by real clients: the broker's
log cleaner (every log.cleaner.backoff.ms) keeps the newest record of every key at its
original offset, drops superseded records, drops tombstones once delete.retention.ms has
passed and keeps them before, never touches the active segment, and leaves the log start
offset where it was. A cleanup.policy=delete topic with the same records is left alone."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from conftest import MOCK, create_topic

pytestmark = pytest.mark.krafty_only

KEYS = [f"k{i}" for i in range(10)]
ROUNDS = 15
DEAD = {"k0", "k1"}  # tombstoned after the last round


@pytest.fixture(scope="module")
def cnode(tmp_path_factory):
    if MOCK:
        pytest.skip("KRAFTY_IT_TARGET=mock: compaction is tested against krafty")
    from conftest import _start_node

    node = _start_node(tmp_path_factory.mktemp("compaction"), extra_properties={"log.cleaner.backoff.ms": "300"})
    yield node
    node.close()


def _produce_history(bootstrap: str, topic: str) -> tuple[dict[int, tuple[bytes, bytes | None]], int]:
    """ROUNDS updates of every key (one batch per round), tombstones for DEAD, then filler
    records that roll the segment, so that the history is all in cleanable segments.
    Returns {offset: (key, value)} from the delivery reports and the log end offset."""
    written: dict[int, tuple[bytes, bytes | None]] = {}

    def cb(err, msg):
        assert err is None, err
        written[msg.offset()] = (msg.key(), msg.value())

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "enable.idempotence": True})
    for r in range(ROUNDS):
        for k in KEYS:
            p.produce(topic, key=k.encode(), value=f"{k}-{r}".encode(), partition=0, on_delivery=cb)
        assert p.flush(30) == 0
    for k in sorted(DEAD):
        p.produce(topic, key=k.encode(), value=None, partition=0, on_delivery=cb)
    assert p.flush(30) == 0
    for i in range(40):  # ~4 KiB of filler: two more segments of 2 KiB
        p.produce(topic, key=b"filler", value=b"f%03d" % i + b"." * 96, partition=0, on_delivery=cb)
        assert p.flush(30) == 0
    return written, max(written) + 1


def _read_all(bootstrap: str, topic: str, end: int) -> tuple[list, int]:
    """Every record of partition 0 from the beginning to ``end`` as (offset, key, value), and
    the low watermark (log start offset)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    if out and out[-1][0] >= end - 1:
                        break
                    continue
                raise AssertionError(m.error())
            out.append((m.offset(), m.key(), m.value()))
        low, _high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return out, low
    finally:
        c.close()


def _newest(written: dict[int, tuple[bytes, bytes | None]]) -> dict[bytes, int]:
    newest: dict[bytes, int] = {}
    for off in sorted(written):
        newest[written[off][0]] = off
    return newest


def _wait_read(bootstrap, topic, end, pred, what: str, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while True:
        recs, low = _read_all(bootstrap, topic, end)
        if pred(recs):
            return recs, low
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; read {len(recs)} records: {recs[:12]} ...")
        time.sleep(0.5)


def _history_keys_once(recs) -> bool:
    seen = [k for _o, k, _v in recs if k != b"filler"]
    return len(seen) == len(set(seen))


@pytest.mark.parametrize("tombstones", ["removed", "kept"])
def test_compaction_keeps_the_newest_record_of_every_key_at_its_offset(cnode, tombstones):
    topic = f"compacted-{tombstones}-{uuid.uuid4().hex[:6]}"
    configs = {"cleanup.policy": "compact", "segment.bytes": "2048"}
    if tombstones == "removed":
        configs["delete.retention.ms"] = "0"
    create_topic(cnode, topic, 1, configs)
    written, end = _produce_history(cnode.bootstrap, topic)
    newest = _newest(written)

    def cleaned(recs) -> bool:
        keys = {k for _o, k, _v in recs}
        return _history_keys_once(recs) and (tombstones == "kept" or not keys & {k.encode() for k in DEAD})

    recs, low = _wait_read(cnode.bootstrap, topic, end, cleaned, "the cleaner to compact the history")
    assert low == 0, "compaction does not move the log start offset"
    for off, k, v in recs:
        assert written[off] == (k, v), f"offset {off} holds {(k, v)}, {written[off]} was written there"
    by_key = {k: off for off, k, _v in recs}
    for k in KEYS:
        kb = k.encode()
        if k in DEAD and tombstones == "removed":
            assert kb not in by_key, f"the tombstone of {k} (delete.retention.ms=0) is gone, and all before it"
        else:
            assert by_key[kb] == newest[kb], f"{k}: the newest record (offset {newest[kb]}) is kept"
    if tombstones == "kept":
        assert [v for _o, k, v in recs if k.decode() in DEAD] == [None, None], "tombstones within delete.retention"
    filler = [off for off, k, _v in recs if k == b"filler"]
    assert filler[-1] == end - 1, "the newest filler record, in the active segment, is there"
    assert len(recs) < len(written) / 3, f"{len(recs)} of {len(written)} records left"


def test_delete_policy_topic_is_not_compacted(cnode):
    topic = f"plain-{uuid.uuid4().hex[:6]}"
    create_topic(cnode, topic, 1, {"segment.bytes": "2048"})
    written, end = _produce_history(cnode.bootstrap, topic)
    time.sleep(1.5)  # several cleaner passes (log.cleaner.backoff.ms=300)
    recs, low = _read_all(cnode.bootstrap, topic, end)
    assert low == 0
    assert [(o, k, v) for o, k, v in recs] == [(o, *written[o]) for o in sorted(written)]


def test_max_compaction_lag_compacts_a_log_the_dirty_ratio_never_would(cnode):
    """min.cleanable.dirty.ratio=1 never cleans by the ratio (Kafka: ratio > min); with
    max.compaction.lag.ms=1 s the log is compacted once its oldest dirty record is that old,
    and the active segment rolls by then, so the newest history is compacted too."""
    topic = f"maxlag-{uuid.uuid4().hex[:6]}"
    create_topic(cnode, topic, 1, {"cleanup.policy": "compact", "segment.bytes": "2048",
                                   "min.cleanable.dirty.ratio": "1", "max.compaction.lag.ms": "1000"})
    written, end = _produce_history(cnode.bootstrap, topic)
    recs, low = _wait_read(cnode.bootstrap, topic, end, _history_keys_once, "max.compaction.lag.ms to compact the log")
    assert low == 0
    for off, k, v in recs:
        assert written[off] == (k, v)


def test_min_compaction_lag_keeps_young_records(cnode):
    """min.compaction.lag.ms=1 h: every record is younger, so nothing is compacted whatever the
    dirty ratio (the same history is compacted at once without it, see above)."""
    topic = f"minlag-{uuid.uuid4().hex[:6]}"
    create_topic(cnode, topic, 1, {"cleanup.policy": "compact", "segment.bytes": "2048",
                                   "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "3600000"})
    written, end = _produce_history(cnode.bootstrap, topic)
    time.sleep(1.5)  # several cleaner passes (log.cleaner.backoff.ms=300)
    recs, _low = _read_all(cnode.bootstrap, topic, end)
    assert [(o, k, v) for o, k, v in recs] == [(o, *written[o]) for o in sorted(written)]


def test_log_configs_through_admin_clients(cnode):
    """The compaction lags, segment.jitter.ms, file.delete.delay.ms and the tiered-storage keys
    are described and altered through confluent-kafka; a bad combination or value is
    INVALID_CONFIG naming the key, on CreateTopics and IncrementalAlterConfigs alike."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

    a = AdminClient({"bootstrap.servers": cnode.bootstrap})
    topic = f"cfg-{uuid.uuid4().hex[:6]}"
    create_topic(cnode, topic, 1, {"min.compaction.lag.ms": "100", "max.compaction.lag.ms": "60000",
                                   "segment.jitter.ms": "5000", "file.delete.delay.ms": "0",
                                   "remote.storage.enable": "false", "local.retention.ms": "-2"})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    described = a.describe_configs([res])[res].result(30)
    assert {k: described[k].value for k in ("min.compaction.lag.ms", "max.compaction.lag.ms", "segment.jitter.ms",
                                            "file.delete.delay.ms", "remote.storage.enable")} == {
        "min.compaction.lag.ms": "100", "max.compaction.lag.ms": "60000", "segment.jitter.ms": "5000",
        "file.delete.delay.ms": "0", "remote.storage.enable": "false"}

    for configs, key in (({"min.compaction.lag.ms": "5000", "max.compaction.lag.ms": "1000"}, "max.compaction.lag.ms"),
                         ({"remote.storage.enable": "true"}, "remote.storage.enable"),
                         ({"segment.jitter.ms": "-1"}, "segment.jitter.ms"),
                         ({"max.compaction.lag.ms": "0"}, "max.compaction.lag.ms")):
        bad = f"bad-{uuid.uuid4().hex[:6]}"
        with pytest.raises(KafkaException) as ei:
            a.create_topics([NewTopic(bad, 1, 1, config=configs)])[bad].result(30)
        assert ei.value.args[0].name() == "INVALID_CONFIG" and key in ei.value.args[0].str(), configs
    alter = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("min.compaction.lag.ms", "120000", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as ei:
        a.incremental_alter_configs([alter])[alter].result(30)
    assert ei.value.args[0].name() == "INVALID_CONFIG" and "min.compaction.lag.ms" in ei.value.args[0].str()
    assert a.describe_configs([res])[res].result(30)["min.compaction.lag.ms"].value == "100", "nothing changed"
