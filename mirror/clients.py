"""The confluent-kafka clients of a mirror, built from a cluster's configuration, and the admin
calls the flows make (blocking, with the ``admin.timeout.ms`` deadline), each failure a
``MirrorError`` with one line saying which cluster refused what."""

from __future__ import annotations

import logging
import re

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from confluent_kafka.admin import ConfigEntry as CKConfigEntry

from mirror.config import ClusterClients, MirrorConfigError
from mirror.plan import ConfigEntry

log = logging.getLogger("krafty.mirror")


class MirrorError(Exception):
    """A failure that stops the mirror: one line for the operator."""


_NO_SUCH = re.compile(r'No such configuration property: "([^"]+)"|Invalid value "[^"]*" for configuration property "([^"]+)"'
                      r'|Configuration property "([^"]+)"')


def _built(factory, cluster: ClusterClients, kind: str, conf: dict):
    try:
        return factory(conf)
    except (KafkaException, ValueError, TypeError) as e:
        text = str(e.args[0].str() if isinstance(e, KafkaException) and isinstance(e.args[0], KafkaError)
                   else e)
        m = _NO_SUCH.search(text)
        prop = next((g for g in m.groups() if g), None) if m else None
        where = cluster.key_of(kind, prop) if prop else f"{cluster.alias}.{kind} properties"
        raise MirrorConfigError(f"mirror config: {where}: {text}") from None


def producer(cluster: ClusterClients, **extra) -> Producer:
    conf = cluster.conf("producer", **{"enable.idempotence": True, "acks": "all", "linger.ms": 5,
                                       "client.id": f"krafty-mirror-{cluster.alias}"})
    conf.update(extra)
    return _built(Producer, cluster, "producer", conf)


def consumer(cluster: ClusterClients, **extra) -> Consumer:
    conf = cluster.conf("consumer", **{"enable.auto.commit": False, "enable.auto.offset.store": False,
                                       "client.id": f"krafty-mirror-{cluster.alias}"})
    conf.setdefault("auto.offset.reset", "earliest")  # MM2's default for its source consumer
    conf.update(extra)
    if "group.id" not in conf:
        conf["group.id"] = f"krafty-mirror-{cluster.alias}-unused"  # librdkafka wants one; never joined
    return _built(Consumer, cluster, "consumer", conf)


def validate(cluster: ClusterClients) -> None:
    """Builds (and drops) each kind of client once, so that a property librdkafka does not know
    is reported, naming the config key, before anything connects. They are built without
    bootstrap servers and quiet, so that none of them connects or logs (a producer's connection
    attempt logged after the error line, on stderr, from its own thread)."""
    for kind, factory in (("producer", Producer), ("consumer", Consumer), ("admin", AdminClient)):
        conf = cluster.conf(kind)
        conf.pop("bootstrap.servers", None)
        conf["log_level"] = 0
        if kind == "consumer":
            conf.setdefault("group.id", "krafty-mirror-validate")
        client = _built(factory, cluster, kind, conf)
        if kind == "consumer":
            client.close()
        elif kind == "producer":
            client.flush(0)


def _source(entry) -> int:
    return int(getattr(entry.source, "value", entry.source))


def _err(fut_exc) -> KafkaError | None:
    if isinstance(fut_exc, KafkaException) and fut_exc.args and isinstance(fut_exc.args[0], KafkaError):
        return fut_exc.args[0]
    return None


class Admin:
    """Blocking admin calls on one cluster."""

    def __init__(self, cluster: ClusterClients, timeout_s: float = 60.0):
        self.alias = cluster.alias
        conf = cluster.conf("admin", **{"client.id": f"krafty-mirror-{cluster.alias}-admin"})
        self.client: AdminClient = _built(AdminClient, cluster, "admin", conf)
        self.timeout = timeout_s

    def _fail(self, what: str, e: BaseException) -> MirrorError:
        ke = _err(e)
        text = f"{ke.name()}: {ke.str()}" if ke is not None else f"{type(e).__name__}: {e}"
        return MirrorError(f"cluster {self.alias}: cannot {what}: {text}")

    def topics(self) -> dict[str, int]:
        """topic -> partition count (topics whose metadata has an error left out)."""
        try:
            md = self.client.list_topics(timeout=self.timeout)
        except KafkaException as e:
            raise self._fail("list topics", e) from None
        return {name: len(t.partitions) for name, t in md.topics.items() if t.error is None and t.partitions}

    def broker_count(self) -> int:
        try:
            return len(self.client.list_topics(timeout=self.timeout).brokers)
        except KafkaException as e:
            raise self._fail("describe the cluster", e) from None

    def create_topic(self, name: str, partitions: int, replication_factor: int, config: dict[str, str],
                     rf_key: str) -> bool:
        """True when created, False when it already existed."""
        fut = self.client.create_topics([NewTopic(name, partitions, replication_factor, config=config)],
                                        operation_timeout=self.timeout)[name]
        try:
            fut.result(self.timeout)
            return True
        except KafkaException as e:
            ke = _err(e)
            if ke is not None and ke.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return False
            if ke is not None and ke.code() == KafkaError.INVALID_REPLICATION_FACTOR:
                raise MirrorError(f"cluster {self.alias}: cannot create topic {name}: {ke.str()} "
                                  f"(set {rf_key}, e.g. to 1 or -1 for the broker default)") from None
            raise self._fail(f"create topic {name}", e) from None

    def ensure_compacted_topic(self, name: str, replication_factor: int, rf_key: str) -> None:
        """MirrorUtils.createSinglePartitionCompactedTopic."""
        if self.create_topic(name, 1, replication_factor, {"cleanup.policy": "compact"}, rf_key):
            log.info("created topic %s on %s", name, self.alias)

    def grow(self, topic: str, partitions: int) -> None:
        fut = self.client.create_partitions([NewPartitions(topic, partitions)], operation_timeout=self.timeout)[topic]
        try:
            fut.result(self.timeout)
        except KafkaException as e:
            ke = _err(e)
            if ke is not None and ke.code() == KafkaError.INVALID_PARTITIONS:
                return  # already that many (another instance was first)
            raise self._fail(f"add partitions to {topic}", e) from None

    def topic_configs(self, topics) -> dict[str, list[ConfigEntry]]:
        topics = list(topics)
        if not topics:
            return {}
        futs = self.client.describe_configs([ConfigResource(ResourceType.TOPIC, t) for t in topics],
                                            request_timeout=self.timeout)
        out = {}
        for res, fut in futs.items():
            try:
                entries = fut.result(self.timeout)
            except KafkaException as e:
                ke = _err(e)
                if ke is not None and ke.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    continue  # deleted meanwhile
                raise self._fail(f"describe the configs of topic {res.name}", e) from None
            out[res.name] = [ConfigEntry(e.name, e.value, bool(e.is_default), bool(e.is_read_only), bool(e.is_sensitive),
                                         _source(e) == ConfigSource.STATIC_BROKER_CONFIG.value,
                                         _source(e) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
                             for e in entries.values()]
        return out

    def alter_topic_configs(self, changes: dict[str, list[tuple[str, str | None]]]) -> None:
        resources = []
        for topic, ops in changes.items():
            entries = [CKConfigEntry(name, value if value is not None else "",
                                     incremental_operation=AlterConfigOpType.SET if value is not None
                                     else AlterConfigOpType.DELETE) for name, value in ops]
            resources.append(ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries))
        if not resources:
            return
        for res, fut in self.client.incremental_alter_configs(resources, request_timeout=self.timeout).items():
            try:
                fut.result(self.timeout)
            except KafkaException as e:
                log.warning("%s", self._fail(f"alter the configs of topic {res.name}", e))

    def end_offsets(self, tps: list[TopicPartition]) -> dict[tuple[str, int], int]:
        from confluent_kafka import IsolationLevel, OffsetSpec
        if not tps:
            return {}
        req = {TopicPartition(tp.topic, tp.partition): OffsetSpec.latest() for tp in tps}
        out = {}
        for tp, fut in self.client.list_offsets(req, isolation_level=IsolationLevel.READ_UNCOMMITTED,
                                                request_timeout=self.timeout).items():
            try:
                out[(tp.topic, tp.partition)] = fut.result(self.timeout).offset
            except KafkaException as e:
                raise self._fail(f"list the end offset of {tp.topic}-{tp.partition}", e) from None
        return out
