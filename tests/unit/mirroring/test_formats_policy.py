"""MM2's record layouts byte for byte, its naming policies and filters, and the topic plan."""

import struct

import pytest

from mirror.formats import Checkpoint, Heartbeat, OffsetSync, SchemaError
from mirror.plan import ConfigEntry, config_changes, creation_config, plan_topics
from mirror.policy import (
    CONFIG_PROPERTIES_EXCLUDE_DEFAULT,
    TOPICS_EXCLUDE_DEFAULT,
    IdentityReplicationPolicy,
    NameFilter,
    ReplicationPolicy,
    SourceTopics,
    compile_pattern_list,
)


def s(x: str) -> bytes:
    return struct.pack(">h", len(x)) + x.encode()


def test_offset_sync_layout():
    o = OffsetSync("orders", 3, 100, 42)
    assert o.key() == s("orders") + struct.pack(">i", 3)
    assert o.value() == struct.pack(">qq", 100, 42)
    assert OffsetSync.decode(o.key(), o.value()) == o


def test_checkpoint_layout_has_a_version_header():
    c = Checkpoint("g1", "A.orders", 0, 100, 90, "meta")
    assert c.key() == s("g1") + s("A.orders") + struct.pack(">i", 0)
    assert c.value() == struct.pack(">hqq", 0, 100, 90) + s("meta")
    assert Checkpoint.decode(c.key(), c.value()) == c


def test_heartbeat_layout():
    h = Heartbeat("A", "B", 1700000000000)
    assert h.key() == s("A") + s("B")
    assert h.value() == struct.pack(">hq", 0, 1700000000000)
    assert Heartbeat.decode(h.key(), h.value()) == h


@pytest.mark.parametrize("key,value", [(b"\x00", b""), (s("t") + b"\x00\x00", struct.pack(">qq", 1, 2)),
                                       (s("t") + struct.pack(">i", 0), b"\x00" * 15), (None, b""),
                                       (b"\xff\xff", b"")])
def test_cut_or_bad_records_are_schema_errors(key, value):
    with pytest.raises(SchemaError):
        OffsetSync.decode(key, value)


def test_checkpoint_of_an_unknown_version_is_refused():
    c = Checkpoint("g", "t", 0, 1, 1)
    with pytest.raises(SchemaError, match="version 1"):
        Checkpoint.decode(c.key(), struct.pack(">h", 1) + c.value()[2:])


def test_default_policy_names():
    p = ReplicationPolicy()
    assert p.format_remote_topic("us-west", "orders") == "us-west.orders"
    assert p.topic_source("us-west.orders") == "us-west" and p.upstream_topic("us-west.orders") == "orders"
    assert p.topic_source("orders") is None and p.topic_source("orders.") is None
    assert p.original_topic("B.A.orders") == "orders"
    assert p.offset_syncs_topic("B") == "mm2-offset-syncs.B.internal"
    assert p.checkpoints_topic("A") == "A.checkpoints.internal"
    assert p.is_heartbeats_topic("A.heartbeats") and p.is_heartbeats_topic("heartbeats")
    assert p.is_internal_topic("__consumer_offsets") and p.is_internal_topic("mm2-offsets.A.internal")
    q = ReplicationPolicy("_", internal_separator_enabled=False)
    assert q.format_remote_topic("A", "t") == "A_t" and q.offset_syncs_topic("B") == "mm2-offset-syncs.B.internal"
    assert ReplicationPolicy("_").checkpoints_topic("A") == "A_checkpoints_internal"


def test_identity_policy_keeps_names_but_heartbeats():
    p = IdentityReplicationPolicy(source_alias="A")
    assert p.format_remote_topic("A", "orders") == "orders"
    assert p.format_remote_topic("A", "heartbeats") == "A.heartbeats"
    assert p.topic_source("orders") == "A" and p.upstream_topic("orders") == "orders"


def _flow(policy=None, topics=(".*",), exclude=TOPICS_EXCLUDE_DEFAULT, target="B"):
    return SourceTopics("A", target, policy or ReplicationPolicy(),
                        NameFilter(compile_pattern_list(list(topics)), compile_pattern_list(list(exclude))))


def test_topic_selection_filters_internal_topics_and_cycles():
    f = _flow(topics=["orders.*", "payments"])
    assert f.should_replicate("orders") and f.should_replicate("orders-eu") and f.should_replicate("payments")
    assert not f.should_replicate("payments2")            # whole-name matches
    assert not f.should_replicate("__consumer_offsets")
    assert not f.should_replicate("mm2-offset-syncs.B.internal")
    assert f.should_replicate("heartbeats") and f.should_replicate("C.heartbeats")  # always, unless disabled
    g = _flow()
    assert not g.should_replicate("B.orders")             # came from the target: a cycle
    assert not g.should_replicate("C.B.orders")
    assert g.should_replicate("C.orders")
    assert not _flow(topics=[]).should_replicate("orders")  # an empty list matches nothing
    assert _flow(exclude=[]).should_replicate("x.replica")


def test_checkpoint_topic_renaming():
    f = _flow()
    assert f.rename_for_checkpoint("orders") == "A.orders"
    assert f.rename_for_checkpoint("B.orders") == "orders"


def test_topic_plan_creates_and_grows():
    f = _flow()
    plan = plan_topics(f, {"orders": 3, "pay": 2, "__consumer_offsets": 50, "B.x": 1}, {"A.pay": 1, "other": 4})
    assert plan.replicated == {"orders": "A.orders", "pay": "A.pay"}
    assert plan.create == {"orders": 3}
    assert plan.grow == {"A.pay": 2}
    ident = _flow(IdentityReplicationPolicy(source_alias="A"))
    assert plan_topics(ident, {"orders": 3}, {"orders": 3}).create == {}


def test_topic_configs_follow_the_source():
    ex = compile_pattern_list(CONFIG_PROPERTIES_EXCLUDE_DEFAULT)
    src = [ConfigEntry("retention.ms", "1000", topic_override=True),
           ConfigEntry("cleanup.policy", "delete", is_default=True),
           ConfigEntry("min.insync.replicas", "2", topic_override=True),       # excluded by default
           ConfigEntry("segment.bytes", "100", static_broker=True),
           ConfigEntry("x.secret", "s", sensitive=True),
           ConfigEntry("max.message.bytes", "2000", topic_override=True)]
    assert creation_config(src, ex, "target") == {"retention.ms": "1000", "max.message.bytes": "2000"}
    assert creation_config(src, ex, "source")["cleanup.policy"] == "delete"
    tgt = [ConfigEntry("retention.ms", "5", topic_override=True),
           ConfigEntry("cleanup.policy", "compact", topic_override=True),
           ConfigEntry("max.message.bytes", "2000", topic_override=True)]
    # set what differs, delete the target's override where the source uses its default
    assert config_changes(src, tgt, ex, "target") == [("retention.ms", "1000"), ("cleanup.policy", None)]
    assert config_changes(src, tgt, ex, "source") == [("retention.ms", "1000"), ("cleanup.policy", "delete")]
