"""The MM2 config file: keys, per-flow overrides, defaults, and one-line errors naming the key."""

import pytest

from mirror.config import MirrorConfigError, parse, unescape_value
from mirror.policy import IdentityReplicationPolicy

BASE = """clusters = A, B
A.bootstrap.servers = 127.0.0.1:9092
B.bootstrap.servers = 127.0.0.1:9093
A->B.enabled = true
"""


def test_defaults_are_mm2s():
    cfg = parse(BASE)
    (f,) = cfg.flows
    assert f.name == "A->B" and f.group_id == "A-mm2"
    assert f["replication.factor"] == 2 and f["offset.lag.max"] == 100
    assert f["emit.checkpoints.interval.seconds"] == 60 and not f["sync.group.offsets.enabled"]
    assert f["refresh.topics.interval.seconds"] == 600 and f["sync.topic.configs.enabled"]
    assert not f.exactly_once
    assert f.topic_filter("orders") and not f.topic_filter("mm2-offsets.A.internal")
    assert f.group_filter("app") and not f.group_filter("console-consumer-1")
    assert f.policy.format_remote_topic("A", "t") == "A.t"
    # heartbeats both ways (B->A emits into A so that A's heartbeats reach B), one flow
    assert sorted((s, t) for s, t, _, _ in cfg.heartbeat_pairs) == [("A", "B"), ("B", "A")]
    assert cfg.clusters["A"].conf("consumer")["bootstrap.servers"] == "127.0.0.1:9092"


def test_flow_keys_override_top_level_keys():
    cfg = parse(BASE + "topics = a.*\nA->B.topics = orders, pay.*\nreplication.factor = 1\n"
                "A->B.sync.group.offsets.enabled = true\n"
                "replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy\n"
                "A->B.exactly.once.source.support = enabled\nemit.heartbeats.enabled = false\n")
    (f,) = cfg.flows
    assert f.topic_filter("orders") and f.topic_filter("payments") and not f.topic_filter("a1")
    assert f["replication.factor"] == 1 and f["sync.group.offsets.enabled"] and f.exactly_once
    assert isinstance(f.policy, IdentityReplicationPolicy) and f.policy.format_remote_topic("A", "t") == "t"
    assert cfg.heartbeat_pairs == []


def test_client_properties_per_cluster_and_kind():
    cfg = parse(BASE + "A.consumer.fetch.max.bytes = 1000\nA.producer.linger.ms = 7\nsecurity.protocol = SASL_PLAINTEXT\n"
                "sasl.mechanism = PLAIN\nB.security.protocol = PLAINTEXT\n"
                'sasl.jaas.config = org.apache.kafka.common.security.plain.PlainLoginModule required '
                'username="u" password="p";\nA.ssl.truststore.location = /ca.pem\nA.key.deserializer = x\n')
    a, b = cfg.clusters["A"], cfg.clusters["B"]
    assert a.conf("consumer")["fetch.max.bytes"] == "1000" and "fetch.max.bytes" not in a.conf("producer")
    assert a.conf("producer")["linger.ms"] == "7"
    assert a.conf("admin")["security.protocol"] == "SASL_PLAINTEXT"
    assert b.conf("admin")["security.protocol"] == "PLAINTEXT"       # the cluster's own wins
    assert a.conf("admin")["sasl.username"] == "u" and a.conf("admin")["sasl.password"] == "p"
    assert a.conf("admin")["ssl.ca.location"] == "/ca.pem"
    assert "key.deserializer" not in a.conf("consumer") and any("key.deserializer" in w for w in cfg.warnings)
    assert a.key_of("consumer", "fetch.max.bytes") == "A.consumer.fetch.max.bytes"


def test_java_properties_escapes_in_values():
    assert unescape_value(r".*\\.internal") == r".*\.internal"
    cfg = parse(BASE + "topics.exclude = .*\\\\.skip\n")
    assert not cfg.flows[0].topic_filter("x.skip") and cfg.flows[0].topic_filter("xskip")


def test_unused_mm2_keys_are_warned_about():
    cfg = parse(BASE + "tasks.max = 4\nconfig.storage.replication.factor = 1\n")
    assert any("tasks.max" in w for w in cfg.warnings) and any("config.storage" in w for w in cfg.warnings)


@pytest.mark.parametrize("extra,expected", [
    ("A->B.topcs = x\n", "A->B.topcs = 'x': unknown key 'topcs' for flow A->B"),
    ("emit.checkpoints.interval.seconds = soon\n", "emit.checkpoints.interval.seconds = 'soon': expected a whole number"),
    ("A->B.sync.group.offsets.enabled = yes\n", "A->B.sync.group.offsets.enabled = 'yes': expected true or false"),
    ("topics = [orders\n", "topics = '[orders': '[orders' is not a regular expression"),
    ("replication.policy.class = MyPolicy\n", "replication.policy.class = 'MyPolicy': expected org.apache"),
    ("A->C.enabled = true\n", "A->C.enabled = 'true': the flow names a cluster that is not in 'clusters'"),
    ("refresh.topic.interval.seconds = 5\n", "refresh.topic.interval.seconds = '5': unknown key"),
    ("replication.factor = 0\n", "replication.factor = '0': expected a replication factor >= 1"),
    ("exactly.once.source.support = on\n", "exactly.once.source.support = 'on': expected one of disabled, preparing, enabled"),
    ("A->B.exactly.once.support = required\n", "exactly-once is required but exactly.once.source.support"),
    ("exactly.once.source.support = enabled\nA.consumer.isolation.level = read_uncommitted\n",
     "A.consumer.isolation.level = 'read_uncommitted': exactly-once mirroring needs"),
    ("sasl.jaas.config = nonsense\n", "sasl.jaas.config = (hidden): expected '<LoginModule>"),
])
def test_a_bad_key_or_value_is_one_line_naming_it(extra, expected):
    with pytest.raises(MirrorConfigError) as e:
        parse(BASE + extra, source="mm2.properties")
    text = str(e.value)
    assert expected in text and "\n" not in text, text
    assert text.startswith("mirror config mm2.properties")


@pytest.mark.parametrize("text,expected", [
    ("A.bootstrap.servers = x:1\n", "'clusters' is missing"),
    ("clusters = A, B\nA.bootstrap.servers = x:1\nB.bootstrap.servers = y:1\n", "no flow is enabled"),
    ("clusters = A, B\nA.bootstrap.servers = x:1\nA->B.enabled = true\n", "B.bootstrap.servers is missing"),
    ("clusters = A, A\n", "an alias is listed twice"),
    ("clusters = A.x, B\n", "alias 'A.x' may hold only"),
])
def test_missing_pieces(text, expected):
    with pytest.raises(MirrorConfigError, match=expected):
        parse(text)
