"""Replication throttles (broker/replica/throttle.py): which replicas a topic config throttles,
and the sampled-rate quota (Kafka's ReplicationQuotaManager)."""

from broker.replica.throttle import ALL, UNLIMITED, ReplicationQuota, throttled_partitions

KEY = "leader.replication.throttled.replicas"


def test_throttled_partitions_of_this_broker():
    assert throttled_partitions("0:1,1:2,2:1", 1) == {0, 2}
    assert throttled_partitions("0:1,1:2", 3) == frozenset()
    assert throttled_partitions("*", 3) is ALL
    assert throttled_partitions("", 1) == frozenset()


def test_is_throttled_reads_the_topic_config():
    q = ReplicationQuota(2, KEY, 1000)
    assert q.is_throttled({KEY: "0:1,1:2"}, 1) and not q.is_throttled({KEY: "0:1,1:2"}, 0)
    assert q.is_throttled({KEY: "*"}, 7)
    assert not q.is_throttled({}, 1)


def test_quota_is_exceeded_above_its_rate_over_the_window():
    q = ReplicationQuota(1, KEY, 1000, window_num=11, window_s=1.0)
    # the rate is measured over at least 10 full windows: 10 s x 1000 B/s may go at once
    q.record(9_000, now=0.0)
    assert not q.is_exceeded(0.0)
    q.record(2_000, now=0.5)
    assert q.is_exceeded(0.5)
    assert q.is_exceeded(5.0)
    assert not q.is_exceeded(11.0)  # 11,000 bytes over 11 s: at the quota, not above it


def test_unlimited_quota_is_never_exceeded():
    q = ReplicationQuota(1, KEY, UNLIMITED)
    q.record(10**12, now=0.0)
    assert not q.enabled and not q.is_exceeded(0.0)
