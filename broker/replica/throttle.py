"""Replication throttles (Kafka's ReplicationQuotaManager), pure: the caller passes ``now``.

Two quotas per broker: the leader's sends to followers (``leader.replication.throttled.rate``)
and this broker's fetches as a follower (``follower.replication.throttled.rate``), bytes/s
measured like Kafka's sampled Rate (``replication.quota.window.num`` samples of
``replication.quota.window.size.seconds``). They apply only to the partitions a topic lists for
this broker in ``leader.replication.throttled.replicas`` / ``follower.replication.throttled.replicas``
(``partition:broker,...`` or ``*``), and only to replicas that are not in sync: as in Kafka, the
leader leaves a throttled partition out of its answer to an out-of-sync follower while its quota
is exceeded, and the follower leaves it out of its fetch while its own is (ISR traffic is never
throttled, so a throttle cannot hold back acks=all produces).
"""

from __future__ import annotations

from broker.security.quotas import ClientQuotas

UNLIMITED = 2**63 - 1
ALL = None  # every partition of the topic


def throttled_partitions(value: str | None, broker_id: int) -> frozenset[int] | None:
    """The partitions of a topic throttled on ``broker_id`` by a (validated) throttled-replicas
    value: ``None`` for all (``*``), else the partition ids listed with this broker."""
    value = (value or "").strip()
    if value == "*":
        return ALL
    out = set()
    for item in value.split(","):
        p, _, b = item.strip().partition(":")
        if b.strip().isdigit() and int(b) == broker_id and p.strip().isdigit():
            out.add(int(p))
    return frozenset(out)


class ReplicationQuota:
    """One broker-wide quota (leader or follower side) and the partitions it covers."""

    def __init__(self, broker_id: int, config_key: str, rate: int, window_num: int = 11, window_s: float = 1.0):
        self.broker_id = broker_id
        self.config_key = config_key  # the topic config listing the throttled replicas
        self.rate = rate
        self._rate = ClientQuotas(window_num, window_s)  # its sampled rate (Kafka's Rate)
        self._parsed: dict[str, frozenset[int] | None] = {}

    @property
    def enabled(self) -> bool:
        return self.rate < UNLIMITED

    def is_throttled(self, topic_config: dict, partition: int) -> bool:
        """Whether the topic (its config overrides) lists ``partition`` on this broker."""
        value = topic_config.get(self.config_key)
        if not value:
            return False
        parts = self._parsed.get(value, frozenset())
        if parts == frozenset() and value not in self._parsed:
            if len(self._parsed) > 10_000:
                self._parsed.clear()
            parts = self._parsed[value] = throttled_partitions(value, self.broker_id)
        return parts is ALL or partition in parts

    def record(self, nbytes: int, now: float) -> None:
        s = self._rate._sensor("replication", now)
        s.totals[-1] += nbytes

    def is_exceeded(self, now: float) -> bool:
        """The rate over the window is above the quota (Kafka's isQuotaExceeded)."""
        if not self.enabled:
            return False
        s = self._rate._sensor("replication", now)
        return sum(s.totals) / self._rate._window(s, now) > self.rate
