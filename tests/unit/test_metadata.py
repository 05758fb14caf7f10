import random
import uuid

import pytest

from common.errors import ErrorCode, KafkaError
from controller import topics as t
from metadata import records as r
from metadata.delta import MetadataDelta, image_from_records
from metadata.image import EMPTY


def _cluster(n=3, racks=None):
    recs = [r.RegisterBrokerRecord(i, uuid.uuid4(), 1, (r.Endpoint("PLAINTEXT", "h", 9000 + i),),
                                   racks[i] if racks else None, fenced=False) for i in range(n)]
    return image_from_records(recs, len(recs) - 1, 1)


def test_records_round_trip_through_encoding():
    tid = uuid.uuid4()
    for rec in [r.TopicRecord("a", tid), r.PartitionRecord(tid, 0, (1, 2), (1,), 1, 3, 4),
                r.PartitionChangeRecord(tid, 0, isr=(1, 2)), r.ConfigRecord(2, "a", "k", None),
                r.RegisterBrokerRecord(1, tid, 5, (r.Endpoint("PLAINTEXT", "h", 1),), "r1"),
                r.ProducerIdsRecord(1, 2, 3), r.RemoveTopicRecord(tid), r.ClusterIdRecord("x")]:
        assert r.decode(r.encode(rec)) == rec


def test_image_snapshot_records_rebuild_the_same_image():
    img = _cluster()
    recs, _ = t.create_topics(img, [t.NewTopic("a", 4, 2, configs={"retention.ms": "10"})], t.TopicDefaults(),
                              random.Random(1))
    d = MetadataDelta(img)
    for rec in recs:
        d.replay(rec)
    img2 = d.apply(100, 2)
    rebuilt = image_from_records(list(img2.to_records()), 100, 2)
    assert rebuilt == img2


def test_delta_does_not_mutate_the_base_image():
    img = _cluster()
    recs, _ = t.create_topics(img, [t.NewTopic("a", 1, 1)], t.TopicDefaults(), random.Random(1))
    d = MetadataDelta(img)
    for rec in recs:
        d.replay(rec)
    d.apply(10, 1)
    assert img.topics_by_name == {}


def test_leader_change_bumps_leader_and_partition_epochs():
    img = _cluster()
    recs, _ = t.create_topics(img, [t.NewTopic("a", 1, 3)], t.TopicDefaults(), random.Random(1))
    img = image_from_records(recs, 10, 1, base=img)
    tid = img.topics_by_name["a"].topic_id
    p0 = img.topics_by_name["a"].partitions[0]
    new_leader = p0.replicas[1]
    d = MetadataDelta(img)
    d.replay(r.PartitionChangeRecord(tid, 0, leader=new_leader))
    changes = d.local_changes(new_leader)
    p1 = d.apply(11, 1).topics_by_name["a"].partitions[0]
    assert (p1.leader, p1.leader_epoch, p1.partition_epoch) == (new_leader, 1, 1)
    assert ("a", 0) in changes.leaders


def test_local_changes_report_deletes():
    img = _cluster(1)
    recs, _ = t.create_topics(img, [t.NewTopic("a", 2, 1)], t.TopicDefaults(), random.Random(1))
    img = image_from_records(recs, 10, 1, base=img)
    d = MetadataDelta(img)
    d.replay(r.RemoveTopicRecord(img.topics_by_name["a"].topic_id))
    assert d.local_changes(0).deletes == {("a", 0), ("a", 1)}
    assert "a" not in d.apply(11, 1).topics_by_name


@pytest.mark.parametrize("name,code", [
    ("", ErrorCode.INVALID_TOPIC_EXCEPTION), ("..", ErrorCode.INVALID_TOPIC_EXCEPTION),
    ("a" * 250, ErrorCode.INVALID_TOPIC_EXCEPTION), ("bad name", ErrorCode.INVALID_TOPIC_EXCEPTION),
])
def test_invalid_topic_names_are_rejected(name, code):
    _, res = t.create_topics(_cluster(), [t.NewTopic(name)], t.TopicDefaults(), random.Random(1))
    assert res[0].error == code


def test_create_topic_errors():
    img = _cluster(3)
    recs, _ = t.create_topics(img, [t.NewTopic("a.b")], t.TopicDefaults(), random.Random(1))
    img = image_from_records(recs, 10, 1, base=img)
    _, res = t.create_topics(img, [t.NewTopic("a.b"), t.NewTopic("a_b"), t.NewTopic("x", 1, 4),
                                   t.NewTopic("y", 0, 1), t.NewTopic("z", configs={"retention.ms": "soon"}),
                                   t.NewTopic("w", configs={"no.such": "1"})],
                             t.TopicDefaults(), random.Random(1))
    assert [x.error for x in res] == [ErrorCode.TOPIC_ALREADY_EXISTS, ErrorCode.INVALID_TOPIC_EXCEPTION,
                                      ErrorCode.INVALID_REPLICATION_FACTOR, ErrorCode.INVALID_PARTITIONS,
                                      ErrorCode.INVALID_CONFIG, ErrorCode.INVALID_CONFIG]
    assert "larger than available brokers: 3" in res[2].message


def test_create_partitions_only_increases():
    img = _cluster(2)
    recs, _ = t.create_topics(img, [t.NewTopic("a", 2, 2)], t.TopicDefaults(), random.Random(1))
    img = image_from_records(recs, 10, 1, base=img)
    with pytest.raises(Exception, match="would not be an increase"):
        t.create_partitions(img, "a", 1, None, random.Random(1))
    new = t.create_partitions(img, "a", 4, None, random.Random(1))
    assert [x.partition_id for x in new] == [2, 3] and all(len(x.replicas) == 2 for x in new)


def test_empty_image_has_no_topics():
    assert EMPTY.topics_by_name == {} and EMPTY.offset == -1


def test_every_record_type_round_trips_through_encoding():
    tid, other = uuid.uuid4(), uuid.uuid4()
    samples = [
        r.RegisterBrokerRecord(1, tid, 5, (r.Endpoint("PLAINTEXT", "h", 1), r.Endpoint("SSL", "h", 2, "SSL")), None,
                               fenced=False, in_controlled_shutdown=True),
        r.UnregisterBrokerRecord(1, 5), r.BrokerRegistrationChangeRecord(1, 5, fenced=True),
        r.TopicRecord("a", tid), r.RemoveTopicRecord(other), r.PartitionRecord(tid, 7, (1, 2, 3), (2,), 2, 9, 11),
        r.PartitionChangeRecord(tid, 7, isr=(1,), leader=-1, replicas=(1, 2)), r.PartitionChangeRecord(other, 0),
        r.ConfigRecord(2, "a", "k", "v"), r.ProducerIdsRecord(1, 2, 3), r.FeatureLevelRecord("metadata.version", 21),
        r.ClusterIdRecord("x"), r.NoOpRecord(),
        r.AccessControlEntryRecord(other, 2, "t", 3, "User:a", "*", 2, 3), r.RemoveAccessControlEntryRecord(other),
        r.ClientQuotaRecord((("user", "alice"), ("client-id", None)), "producer_byte_rate", 1024.0),
        r.ClientQuotaRecord((("ip", None),), "connection_creation_rate", remove=True),
        r.UserScramCredentialRecord("alice", "SCRAM-SHA-256", b"\x00salt", b"\x01stored", b"\x02server", 8192),
        r.RemoveUserScramCredentialRecord("alice", "SCRAM-SHA-512"), r.ScramDecoySeedRecord(b"\xffseed"),
    ]
    assert {type(s) for s in samples} == set(r.RECORD_TYPES.values())
    for rec in samples:
        back = r.decode(r.encode(rec))
        assert back == rec and type(back) is type(rec), rec


def test_topic_config_checks_across_keys_answer_invalid_config_naming_the_keys():
    """Kafka's LogConfig.validate: min.compaction.lag.ms above max.compaction.lag.ms, tiered
    storage asked of a broker without it, and each key's own range are INVALID_CONFIG naming
    the key; the tiered-storage keys that need no remote storage are taken."""
    img = _cluster(1)
    bad = {"min.compaction.lag.ms": "5000", "max.compaction.lag.ms": "1000"}
    _, res = t.create_topics(img, [
        t.NewTopic("a", configs=bad), t.NewTopic("b", configs={"remote.storage.enable": "true"}),
        t.NewTopic("c", configs={"segment.jitter.ms": "-1"}), t.NewTopic("d", configs={"file.delete.delay.ms": "-5"}),
        t.NewTopic("e", configs={"max.compaction.lag.ms": "0"}),
        t.NewTopic("ok", configs={"min.compaction.lag.ms": "1000", "max.compaction.lag.ms": "1000",
                                  "remote.storage.enable": "false", "local.retention.ms": "-2",
                                  "segment.jitter.ms": "10", "file.delete.delay.ms": "0"})],
        t.TopicDefaults(), random.Random(1))
    assert [x.error for x in res] == [ErrorCode.INVALID_CONFIG] * 5 + [ErrorCode.NONE]
    for x, key in zip(res, ("min.compaction.lag.ms", "remote.storage.enable", "segment.jitter.ms",
                            "file.delete.delay.ms", "max.compaction.lag.ms"), strict=False):
        assert key in x.message, x.message


def test_altering_a_topic_config_checks_the_whole_config():
    img = _cluster(1)
    recs, _ = t.create_topics(img, [t.NewTopic("a", configs={"max.compaction.lag.ms": "1000"})], t.TopicDefaults(),
                              random.Random(1))
    img = image_from_records(recs, 10, 1, base=img)
    with pytest.raises(KafkaError) as e:
        t.alter_topic_configs(img, "a", [("min.compaction.lag.ms", 0, "2000")])
    assert e.value.code == ErrorCode.INVALID_CONFIG and "max.compaction.lag.ms (1000)" in e.value.message
    # the same change with the max removed in the same request is fine (the default max is unbounded)
    assert len(t.alter_topic_configs(img, "a", [("min.compaction.lag.ms", 0, "2000"),
                                               ("max.compaction.lag.ms", 1, None)])) == 2


def test_the_whole_config_check_takes_unset_keys_from_the_controllers_defaults():
    """Kafka checks a topic's configs over the broker's log defaults (extractLogConfigMap): with
    log.cleaner.max.compaction.lag.ms=1000, a topic's min.compaction.lag.ms=5000 conflicts."""
    from common.config import Config, topic_defaults
    cfg = Config({"node.id": "1", "log.cleaner.max.compaction.lag.ms": "1000"})
    defaults = t.TopicDefaults(1, 1, topic_defaults(cfg))
    img = _cluster(1)
    _, res = t.create_topics(img, [t.NewTopic("a", configs={"min.compaction.lag.ms": "5000"}),
                                   t.NewTopic("b", configs={"min.compaction.lag.ms": "500"})], defaults,
                             random.Random(1))
    assert [x.error for x in res] == [ErrorCode.INVALID_CONFIG, ErrorCode.NONE]
    assert "max.compaction.lag.ms (1000)" in res[0].message
    recs, _ = t.create_topics(img, [t.NewTopic("c")], defaults, random.Random(1))
    img = image_from_records(recs, 10, 1, base=img)
    with pytest.raises(KafkaError) as e:
        t.alter_topic_configs(img, "c", [("min.compaction.lag.ms", 0, "2000")], defaults)
    assert e.value.code == ErrorCode.INVALID_CONFIG
