"""Realistic client sessions whose requests the recorder captures: one per client library
(confluent-kafka, kafka-python, aiokafka, kcat), each doing what an application and an
operator do: metadata, create/alter/describe/delete topics and configs, produce with every
codec, acks and idempotence, consume in a group (join/sync/heartbeat/commit/fetch offsets/
leave), list offsets (incl. by timestamp), ACLs, SCRAM credentials, and a SASL login
(PLAIN and SCRAM) on the SASL listener.

A step that fails is reported and skipped: what matters is the traffic it sent."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import time
from collections.abc import Callable

from bench.fuzz.target import ADMIN, SCRAM_MECHANISMS, TOPICS, USERS

log = logging.getLogger("krafty.fuzz.record")
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
TIMEOUT = 20


def step(client: str, name: str, fn: Callable[[], object]) -> object:
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - a failed step still recorded its requests
        log.warning("%s: %s failed: %s", client, name, e)
        return None


def _messages(n: int, tag: str) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    return [(f"k{i}".encode(), f"{tag}-value-{i}".encode() * (1 + i % 3), [("h", f"{i}".encode())]) for i in range(n)]


# --- confluent-kafka (librdkafka) --------------------------------------------------------------

def confluent(bootstrap: str, sasl_bootstrap: str) -> None:
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        NewTopic,
        OffsetSpec,
        ResourcePatternType,
        ResourceType,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    c = "confluent-kafka"
    doomed, group = "fuzz-doomed-confluent", "fuzz-group-confluent"
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def wait(futs):
        return {k: f.result(TIMEOUT) for k, f in futs.items()} if isinstance(futs, dict) else futs.result(TIMEOUT)

    step(c, "create topics", lambda: wait(admin.create_topics(
        [NewTopic(n, p, 1, config=cfg) for n, (p, cfg) in TOPICS.items()]
        + [NewTopic(doomed, 2, 1, config={"retention.ms": "3600000"})], operation_timeout=TIMEOUT)))
    step(c, "metadata", lambda: admin.list_topics(timeout=TIMEOUT))
    step(c, "describe cluster", lambda: wait(admin.describe_cluster(include_authorized_operations=True)))
    step(c, "describe configs", lambda: wait(admin.describe_configs(
        [ConfigResource(ResourceType.TOPIC, "fuzz-compact"), ConfigResource(ResourceType.BROKER, "1")])))
    step(c, "alter configs", lambda: wait(admin.alter_configs(
        [ConfigResource(ResourceType.TOPIC, doomed, set_config={"retention.ms": "7200000"})])))
    step(c, "incremental alter configs", lambda: wait(admin.incremental_alter_configs([ConfigResource(
        ResourceType.TOPIC, doomed, incremental_configs=[
            ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
            ConfigEntry("segment.ms", None, incremental_operation=AlterConfigOpType.DELETE)])])))
    step(c, "create partitions", lambda: wait(admin.create_partitions([NewPartitions(doomed, 3)])))
    acl = AclBinding(ResourceType.TOPIC, "fuzz-plain", ResourcePatternType.LITERAL, "User:alice", "*",
                     AclOperation.READ, AclPermissionType.ALLOW)
    anyf = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                            AclPermissionType.ANY)
    step(c, "create acls", lambda: wait(admin.create_acls([acl])))
    step(c, "describe acls", lambda: wait(admin.describe_acls(anyf)))
    step(c, "delete acls", lambda: wait(admin.delete_acls([AclBindingFilter(
        ResourceType.TOPIC, "fuzz-plain", ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.READ,
        AclPermissionType.ALLOW)])))
    step(c, "alter scram", lambda: wait(admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion(u, ScramCredentialInfo(getattr(ScramMechanism, m.replace("-", "_")), 4096),
                                     pw.encode()) for u, pw in USERS.items() for m in SCRAM_MECHANISMS])))
    step(c, "describe scram", lambda: wait(admin.describe_user_scram_credentials(list(USERS))))

    t0 = int(time.time() * 1000)
    for codec in CODECS:
        for acks, idem in (("0", False), ("1", False), ("all", False), ("all", True)):
            p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "acks": acks,
                          "enable.idempotence": idem, "linger.ms": 5})
            for topic in TOPICS:
                for k, v, h in _messages(4, f"{c}-{codec}-{acks}"):
                    p.produce(topic, value=v, key=k, headers=h)
            step(c, f"produce {codec} acks={acks} idempotence={idem}", lambda p=p: p.flush(TIMEOUT))

    cons = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    cons.subscribe(["fuzz-plain", "fuzz-compact"])
    got, deadline = 0, time.monotonic() + TIMEOUT
    while got < 20 and time.monotonic() < deadline:
        m = cons.poll(0.5)
        if m is not None and m.error() is None:
            got += 1
    time.sleep(1.2)  # a few heartbeats
    step(c, "commit", lambda: cons.commit(asynchronous=False))
    step(c, "committed", lambda: cons.committed([TopicPartition("fuzz-plain", p) for p in range(3)], TIMEOUT))
    step(c, "offsets for times", lambda: cons.offsets_for_times([TopicPartition("fuzz-plain", p, t0)
                                                                 for p in range(3)], TIMEOUT))
    step(c, "watermarks", lambda: cons.get_watermark_offsets(TopicPartition("fuzz-plain", 0), TIMEOUT))

    # a transaction that commits produced records and the group's offsets, then one that aborts:
    # InitProducerId with a transactional id, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn
    tp = Producer({"bootstrap.servers": bootstrap, "transactional.id": "fuzz-txn-confluent", "linger.ms": 5})
    step(c, "init transactions", lambda: tp.init_transactions(TIMEOUT))
    for commit in (True, False):
        tp.begin_transaction()
        for k, v, h in _messages(3, f"{c}-txn-{commit}"):
            tp.produce("fuzz-plain", value=v, key=k, headers=h)
        step(c, f"send offsets to transaction ({'commit' if commit else 'abort'})",
             lambda: tp.send_offsets_to_transaction([TopicPartition("fuzz-plain", 0, 1)],
                                                    cons.consumer_group_metadata(), TIMEOUT))
        step(c, "commit transaction" if commit else "abort transaction",
             lambda commit=commit: tp.commit_transaction(TIMEOUT) if commit else tp.abort_transaction(TIMEOUT))
    cons.close()

    tp0 = TopicPartition("fuzz-plain", 0)
    step(c, "list offsets", lambda: wait(admin.list_offsets({tp0: OffsetSpec.latest()})))
    step(c, "list offsets earliest", lambda: wait(admin.list_offsets({tp0: OffsetSpec.earliest()})))
    step(c, "list offsets by timestamp", lambda: wait(admin.list_offsets({tp0: OffsetSpec.for_timestamp(t0)})))
    step(c, "list offsets max timestamp", lambda: wait(admin.list_offsets({tp0: OffsetSpec.max_timestamp()})))
    step(c, "list groups", lambda: wait(admin.list_consumer_groups()))
    step(c, "describe groups", lambda: wait(admin.describe_consumer_groups([group])))
    step(c, "list group offsets", lambda: wait(admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)])))
    step(c, "alter group offsets", lambda: wait(admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition("fuzz-plain", 0, 1)])])))
    step(c, "delete records", lambda: wait(admin.delete_records([TopicPartition(doomed, 0, 0)])))
    step(c, "delete groups", lambda: wait(admin.delete_consumer_groups([group])))
    step(c, "delete topics", lambda: wait(admin.delete_topics([doomed], operation_timeout=TIMEOUT)))

    for mech, user, pw in (("PLAIN", "alice", USERS["alice"]), ("SCRAM-SHA-256", "alice", USERS["alice"]),
                           ("SCRAM-SHA-512", "bob", USERS["bob"]), ("PLAIN", ADMIN[0], ADMIN[1]),
                           ("PLAIN", "alice", "wrong-password")):
        p = Producer({"bootstrap.servers": sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT",
                      "sasl.mechanism": mech, "sasl.username": user, "sasl.password": pw,
                      "message.timeout.ms": 5000})
        p.produce("fuzz-plain", b"over sasl " + mech.encode())
        step(c, f"sasl {mech} as {user}", lambda p=p: p.flush(6))


# --- kafka-python ------------------------------------------------------------------------------

def kafka_python(bootstrap: str, sasl_bootstrap: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ConfigResource,
        ConfigResourceType,
        KafkaAdminClient,
        NewPartitions,
        NewTopic,
        OffsetSpec,
        ResourcePattern,
        ResourcePatternFilter,
        ResourceType,
    )
    from kafka.structs import OffsetAndMetadata

    c = "kafka-python"
    doomed, group = "fuzz-doomed-kafka-python", "fuzz-group-kafka-python"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=TIMEOUT * 1000)
    step(c, "create topics", lambda: admin.create_topics([NewTopic(doomed, 2, 1, topic_configs={"retention.ms": "60000"})]))
    step(c, "list topics", admin.list_topics)
    step(c, "describe topics", lambda: admin.describe_topics(["fuzz-plain"]))
    step(c, "describe cluster", admin.describe_cluster)
    step(c, "describe configs", lambda: admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, "fuzz-plain"), ConfigResource(ConfigResourceType.BROKER, "1")],
        include_synonyms=True))
    step(c, "alter configs", lambda: admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, doomed, configs={"retention.ms": "120000"})]))
    step(c, "create partitions", lambda: admin.create_partitions({doomed: NewPartitions(3)}))
    pattern = ResourcePattern(ResourceType.TOPIC, "fuzz-plain", ACLResourcePatternType.LITERAL)
    acl = ACL("User:bob", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW, pattern)
    step(c, "create acls", lambda: admin.create_acls([acl]))
    step(c, "describe acls", lambda: admin.describe_acls(ACLFilter(
        None, None, ACLOperation.ANY, ACLPermissionType.ANY,
        ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY))))
    step(c, "delete acls", lambda: admin.delete_acls([ACLFilter(
        "User:bob", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW,
        ResourcePatternFilter(ResourceType.TOPIC, "fuzz-plain", ACLResourcePatternType.LITERAL))]))
    step(c, "describe scram", admin.describe_user_scram_credentials)
    step(c, "describe producers", lambda: admin.describe_producers([TopicPartition("fuzz-plain", 0)]))

    t0 = int(time.time() * 1000)
    for codec in CODECS:
        for acks, idem in ((0, False), (1, False), ("all", True)):
            step(c, f"produce {codec} acks={acks}", lambda codec=codec, acks=acks, idem=idem: _kp_produce(
                KafkaProducer(bootstrap_servers=bootstrap, compression_type=None if codec == "none" else codec,
                              acks=acks, enable_idempotence=idem, linger_ms=5), f"{c}-{codec}-{acks}"))

    cons = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                         enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500)
    cons.subscribe(["fuzz-plain"])
    deadline = time.monotonic() + TIMEOUT
    got = 0
    while got < 20 and time.monotonic() < deadline:
        got += sum(len(v) for v in cons.poll(timeout_ms=500).values())
    time.sleep(1.2)
    step(c, "commit", cons.commit)
    step(c, "committed", lambda: cons.committed(TopicPartition("fuzz-plain", 0)))
    step(c, "offsets for times", lambda: cons.offsets_for_times({TopicPartition("fuzz-plain", p): t0
                                                                 for p in range(3)}))
    step(c, "end offsets", lambda: cons.end_offsets([TopicPartition("fuzz-plain", 0)]))
    step(c, "beginning offsets", lambda: cons.beginning_offsets([TopicPartition("fuzz-plain", 0)]))
    cons.close()

    tp0 = TopicPartition("fuzz-plain", 0)
    step(c, "list partition offsets", lambda: admin.list_partition_offsets(
        {tp0: OffsetSpec.LATEST, TopicPartition("fuzz-plain", 1): t0}))
    step(c, "list groups", admin.list_groups)
    step(c, "describe groups", lambda: admin.describe_groups([group]))
    step(c, "list group offsets", lambda: admin.list_group_offsets({group: None}))
    step(c, "alter group offsets", lambda: admin.alter_group_offsets(group, {tp0: OffsetAndMetadata(1, "", -1)}))
    step(c, "delete group offsets", lambda: admin.delete_group_offsets(group, [tp0]))
    step(c, "delete records", lambda: admin.delete_records({TopicPartition(doomed, 0): 0}))
    step(c, "delete groups", lambda: admin.delete_groups([group]))
    step(c, "delete topics", lambda: admin.delete_topics([doomed]))
    admin.close()

    for mech, user, pw in (("PLAIN", "bob", USERS["bob"]), ("SCRAM-SHA-256", "bob", USERS["bob"])):
        step(c, f"sasl {mech}", lambda mech=mech, user=user, pw=pw: _kp_produce(KafkaProducer(
            bootstrap_servers=sasl_bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism=mech,
            sasl_plain_username=user, sasl_plain_password=pw), f"{c}-sasl-{mech}"))


def _kp_produce(p, tag: str, headers: bool = True) -> None:
    try:
        for topic in TOPICS:
            for k, v, h in _messages(3, tag):
                p.send(topic, value=v, key=k, headers=h if headers else None)
        p.flush(TIMEOUT)
    finally:
        p.close(5)


# --- aiokafka ----------------------------------------------------------------------------------

def aiokafka(bootstrap: str, sasl_bootstrap: str) -> None:
    asyncio.run(_aiokafka(bootstrap, sasl_bootstrap))


async def _astep(client: str, name: str, coro) -> object:
    try:
        return await asyncio.wait_for(coro, TIMEOUT)
    except Exception as e:  # noqa: BLE001
        log.warning("%s: %s failed: %s", client, name, e)
        return None


async def _aiokafka(bootstrap: str, sasl_bootstrap: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
    from aiokafka.admin.records_to_delete import RecordsToDelete

    c = "aiokafka"
    doomed, group = "fuzz-doomed-aiokafka", "fuzz-group-aiokafka"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    await _astep(c, "create topics", admin.create_topics([NewTopic(doomed, 2, 1)]))
    await _astep(c, "list topics", admin.list_topics())
    await _astep(c, "describe topics", admin.describe_topics(["fuzz-plain"]))
    await _astep(c, "describe cluster", admin.describe_cluster())
    await _astep(c, "describe configs", admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, "fuzz-lat"), ConfigResource(ConfigResourceType.BROKER, "1")]))
    await _astep(c, "alter configs", admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, doomed, configs={"retention.ms": "120000"})]))
    await _astep(c, "create partitions", admin.create_partitions({doomed: NewPartitions(4)}))

    t0 = int(time.time() * 1000)
    for codec in CODECS:
        for acks, idem in ((0, False), (1, False), ("all", True)):
            p = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type=None if codec == "none" else codec,
                                 acks=acks, enable_idempotence=idem, linger_ms=5)
            await _astep(c, "producer start", p.start())
            try:
                for topic in TOPICS:
                    for k, v, h in _messages(3, f"{c}-{codec}-{acks}"):
                        await _astep(c, f"send {codec}", p.send(topic, value=v, key=k, headers=h))
                await _astep(c, f"flush {codec} acks={acks}", p.flush())
            finally:
                await p.stop()

    cons = AIOKafkaConsumer("fuzz-plain", bootstrap_servers=bootstrap, group_id=group,
                            auto_offset_reset="earliest", enable_auto_commit=False,
                            session_timeout_ms=6000, heartbeat_interval_ms=500)
    await _astep(c, "consumer start", cons.start())
    try:
        await _astep(c, "getmany", cons.getmany(timeout_ms=3000))
        await asyncio.sleep(1.2)
        await _astep(c, "commit", cons.commit())
        await _astep(c, "committed", cons.committed(TopicPartition("fuzz-plain", 0)))
        await _astep(c, "offsets for times", cons.offsets_for_times({TopicPartition("fuzz-plain", 0): t0}))
        await _astep(c, "end offsets", cons.end_offsets([TopicPartition("fuzz-plain", 1)]))
    finally:
        await cons.stop()

    await _astep(c, "list groups", admin.list_consumer_groups())
    await _astep(c, "describe groups", admin.describe_consumer_groups([group]))
    await _astep(c, "list group offsets", admin.list_consumer_group_offsets(group))
    await _astep(c, "delete records", admin.delete_records({TopicPartition(doomed, 0): RecordsToDelete(0)}))
    await _astep(c, "delete topics", admin.delete_topics([doomed]))
    await admin.close()

    for mech, user, pw in (("PLAIN", "alice", USERS["alice"]), ("SCRAM-SHA-512", "alice", USERS["alice"])):
        p = AIOKafkaProducer(bootstrap_servers=sasl_bootstrap, security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism=mech, sasl_plain_username=user, sasl_plain_password=pw)
        await _astep(c, f"sasl {mech} start", p.start())
        await _astep(c, f"sasl {mech} send", p.send_and_wait("fuzz-plain", b"aiokafka over sasl"))
        await _astep(c, "stop", p.stop())


# --- kcat (librdkafka's command-line client) ---------------------------------------------------

def kcat(bootstrap: str, sasl_bootstrap: str) -> None:
    c = "kcat"

    def run(*args: str, stdin: str | None = None, timeout: float = TIMEOUT) -> None:
        r = subprocess.run(["kcat", *args], input=stdin, capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(r.stderr.strip()[-300:])

    step(c, "metadata", lambda: run("-b", bootstrap, "-L"))
    step(c, "metadata json", lambda: run("-b", bootstrap, "-L", "-J", "-t", "fuzz-plain"))
    lines = "".join(f"key{i}:value {i}\n" for i in range(5))
    for codec in CODECS:
        step(c, f"produce {codec}", lambda codec=codec: run(
            "-b", bootstrap, "-P", "-t", "fuzz-plain", "-K:", "-z", codec if codec != "none" else "none",
            "-X", "acks=all", stdin=lines))
    step(c, "produce compacted", lambda: run("-b", bootstrap, "-P", "-t", "fuzz-compact", "-K:", stdin=lines))
    step(c, "consume", lambda: run("-b", bootstrap, "-C", "-t", "fuzz-plain", "-o", "beginning", "-e", "-c", "20"))
    step(c, "consume group", lambda: run("-b", bootstrap, "-G", "fuzz-group-kcat", "-o", "beginning", "-e", "-c", "10",
                                         "-X", "session.timeout.ms=6000", "fuzz-plain", timeout=30))
    ts = int(time.time() * 1000) - 60_000
    step(c, "query offsets by timestamp", lambda: run("-b", bootstrap, "-Q", "-t", f"fuzz-plain:0:{ts}"))
    step(c, "sasl produce", lambda: run(
        "-b", sasl_bootstrap, "-P", "-t", "fuzz-plain", "-X", "security.protocol=SASL_PLAINTEXT",
        "-X", "sasl.mechanisms=SCRAM-SHA-256", "-X", "sasl.username=bob", "-X", f"sasl.password={USERS['bob']}",
        stdin="kcat over sasl\n"))


# --- old clients: the protocol versions before Kafka 4 (magic 0/1 message sets) ----------------

def kafka_python_legacy(bootstrap: str, sasl_bootstrap: str) -> None:
    """kafka-python pinned to 0.10.0 (Produce/Fetch v2, magic 1, ListOffsets v0, JoinGroup v0), 0.9
    (v1, magic 0, Metadata v0) and 0.8.2 (v0, OffsetCommit v1 without a group) with every codec."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    for api_version in ((0, 10, 0), (0, 9), (0, 8, 2)):
        c = "kafka-python-" + ".".join(map(str, api_version))
        for codec in ("none", "gzip", "snappy", "lz4"):
            step(c, f"produce {codec}", lambda codec=codec, api_version=api_version: _kp_produce(KafkaProducer(
                bootstrap_servers=bootstrap, api_version=api_version, compression_type=None if codec == "none" else codec,
                linger_ms=5), f"legacy-{codec}", headers=False))
        group = f"fuzz-group-{c}"
        cons = KafkaConsumer(bootstrap_servers=bootstrap, api_version=api_version, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False)
        tp = TopicPartition("fuzz-plain", 0)
        if api_version >= (0, 9):
            cons.subscribe(["fuzz-plain"])
        else:
            cons.assign([tp])
        deadline = time.monotonic() + TIMEOUT
        got = 0
        while got < 10 and time.monotonic() < deadline:
            got += sum(len(v) for v in cons.poll(timeout_ms=500).values())
        step(c, "commit", lambda cons=cons, tp=tp: cons.commit({tp: OffsetAndMetadata(1, "legacy", -1)}))
        step(c, "committed", lambda cons=cons, tp=tp: cons.committed(tp))
        step(c, "end offsets", lambda cons=cons, tp=tp: cons.end_offsets([tp]))
        cons.close()


def librdkafka_legacy(bootstrap: str, sasl_bootstrap: str) -> None:
    """librdkafka without ApiVersions, as for brokers 0.9.0 and 0.8.2 (its broker.version.fallback;
    from 0.10 on it asks ApiVersions whatever api.version.request says)."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as CTP
    for fallback in ("0.9.0", "0.8.2"):
        c = f"librdkafka-{fallback}"
        old = {"api.version.request": False, "broker.version.fallback": fallback}
        for codec in ("none", "gzip", "snappy", "lz4"):
            p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5,
                          "enable.idempotence": False, **old})
            for k, v, _h in _messages(3, f"{c}-{codec}"):
                p.produce("fuzz-plain", key=k, value=v)
            step(c, f"produce {codec}", lambda p=p: p.flush(TIMEOUT))
        cons = Consumer({"bootstrap.servers": bootstrap, "group.id": f"fuzz-group-{c}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, **old})
        if fallback == "0.8.2":  # no group management before 0.9
            cons.assign([CTP("fuzz-plain", 0, 0)])
        else:
            cons.subscribe(["fuzz-plain"])
        deadline = time.monotonic() + TIMEOUT
        got = 0
        while got < 10 and time.monotonic() < deadline:
            m = cons.poll(0.5)
            got += m is not None and not m.error()
        step(c, "commit", lambda cons=cons: cons.commit(asynchronous=False))
        cons.close()


# --- share groups (KIP-932): librdkafka's share consumer ---------------------------------------

SHARE_GROUP = "fuzz-share-confluent"


def confluent_share(bootstrap: str, sasl_bootstrap: str) -> None:
    """confluent-kafka's ShareConsumer: ShareGroupHeartbeat (join, steady, leave), ShareFetch with
    piggybacked acknowledgements and ShareAcknowledge (ACCEPT, RELEASE and REJECT in explicit
    mode, commit_sync and commit_async; implicit mode; close). confluent-kafka 2.16's AdminClient
    has no share-group calls (no DescribeShareGroupOffsets, Alter/DeleteShareGroupOffsets,
    ShareGroupDescribe): record.py writes those from SYNTHETIC. What the admin clients do to a
    share group otherwise: the group configs, ListGroups (kafka-python's with the share type
    filter), DescribeGroups and DeleteGroups of it."""
    from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    c = "confluent-kafka-share"
    implicit_group = SHARE_GROUP + "-implicit"
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def wait(futs):
        return {k: f.result(TIMEOUT) for k, f in futs.items()} if isinstance(futs, dict) else futs.result(TIMEOUT)

    for g in (SHARE_GROUP, implicit_group):  # kafka-configs --entity-type groups: read from the start
        step(c, f"group config {g}", lambda g=g: wait(admin.incremental_alter_configs([ConfigResource(
            ResourceType.GROUP, g, incremental_configs=[
                ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])])))
    step(c, "describe group config", lambda: wait(admin.describe_configs([ConfigResource(ResourceType.GROUP,
                                                                                          SHARE_GROUP)])))
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for topic in ("fuzz-plain", "fuzz-compact"):
        for k, v, h in _messages(12, f"{c}-{topic}"):
            p.produce(topic, value=v, key=k, headers=h)
    step(c, "produce", lambda: p.flush(TIMEOUT))

    conf = {"bootstrap.servers": bootstrap, "group.id": SHARE_GROUP, "share.acknowledgement.mode": "explicit"}
    cons = ShareConsumer(conf)
    cons.subscribe(["fuzz-plain", "fuzz-compact"])
    kinds = (AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT)
    got, rounds, deadline = 0, 0, time.monotonic() + TIMEOUT
    while (got < 30 or rounds < 4) and time.monotonic() < deadline:
        msgs = step(c, "poll", lambda: cons.poll(1.0)) or []
        n = 0
        for m in msgs:
            if m.error() is None:
                step(c, "acknowledge", lambda m=m, n=n: cons.acknowledge(m, kinds[n % 3]))
                n += 1
        got += n
        if n:  # the acknowledgements go on the next ShareFetch, or alone in ShareAcknowledge
            rounds += 1
            if rounds % 3 == 1:
                step(c, "commit sync", lambda: cons.commit_sync(TIMEOUT))
            elif rounds % 3 == 2:
                step(c, "commit async", cons.commit_async)
    time.sleep(1.5)  # steady heartbeats
    step(c, "close", cons.close)

    imp = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": implicit_group})
    imp.subscribe(["fuzz-plain"])
    got, deadline = 0, time.monotonic() + TIMEOUT
    while got < 10 and time.monotonic() < deadline:
        got += sum(1 for m in (step(c, "poll implicit", lambda: imp.poll(1.0)) or []) if m.error() is None)
    step(c, "commit sync implicit", lambda: imp.commit_sync(TIMEOUT))
    step(c, "close implicit", imp.close)

    step(c, "list groups", lambda: wait(admin.list_consumer_groups()))
    step(c, "describe groups", lambda: wait(admin.describe_consumer_groups([SHARE_GROUP])))
    step(c, "delete share group", lambda: wait(admin.delete_consumer_groups([implicit_group])))

    from kafka.admin import KafkaAdminClient
    kp = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=TIMEOUT * 1000)
    try:
        step("kafka-python", "list share groups", lambda: kp.list_groups(types_filter=["share"]))
        step("kafka-python", "describe share group", lambda: kp.describe_groups([SHARE_GROUP]))
    finally:
        kp.close()


SESSIONS: dict[str, Callable[[str, str], None]] = {
    "confluent-kafka": confluent,
    "kafka-python": kafka_python,
    "aiokafka": aiokafka,
    "kcat": kcat,
    "kafka-python-legacy": kafka_python_legacy,
    "librdkafka-legacy": librdkafka_legacy,
    "confluent-kafka-share": confluent_share,
}
