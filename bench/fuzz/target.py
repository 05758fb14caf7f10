"""The krafty node the fuzzer (and the corpus recorder) runs against: one process in combined
mode under RLIMIT_AS, with a PLAINTEXT and a SASL_PLAINTEXT listener, the StandardAuthorizer
(ANONYMOUS and admin are super users, so every API is served) and the topics the corpus names.

The topics are chosen so that hostile records reach every path that decodes them: a
compacted topic with small segments (the log cleaner), a topic recompressed on produce
(``compression.type=gzip``), one with LogAppendTime, and a plain one (ListOffsets by
timestamp, Fetch)."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "tests" / "integration") not in sys.path:
    sys.path.insert(0, str(REPO / "tests" / "integration"))

from krafty_node import KraftyNode, api_versions_ok, free_port  # noqa: E402, F401 (re-exported)

# name -> (partitions, topic configs)
TOPICS: dict[str, tuple[int, dict[str, str]]] = {
    "fuzz-plain": (3, {}),
    "fuzz-compact": (1, {"cleanup.policy": "compact", "segment.bytes": "65536", "delete.retention.ms": "1000"}),
    "fuzz-gzip": (1, {"compression.type": "gzip"}),
    "fuzz-lat": (1, {"message.timestamp.type": "LogAppendTime"}),
}
# Topic ids are random per cluster: the corpus carries these ids of the fuzz topics in place of
# the recording node's (record.py), and the fuzzer puts its own node's in their place as it sends
# (harness.py), so a recorded Fetch v13+, ShareFetch or share-state request names a topic the
# fuzz node has
CORPUS_TOPIC_IDS: dict[str, uuid.UUID] = {name: uuid.uuid5(uuid.NAMESPACE_URL, f"krafty-fuzz/{name}") for name in TOPICS}
CANARY_TOPIC = "krafty-fuzz-canary"  # never named in the corpus, so no input can target it by name
ADMIN = ("admin", "admin-secret")
USERS = {"alice": "alice-secret", "bob": "bob-secret"}
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def jaas_plain() -> str:
    users = {ADMIN[0]: ADMIN[1], **USERS}
    opts = "".join(f' user_{u}="{p}"' for u, p in users.items())
    return f"org.apache.kafka.common.security.plain.PlainLoginModule required{opts};"


def _node_class(root: Path | None) -> type[KraftyNode]:
    """KraftyNode of another checkout (it runs the node from the checkout it lives in)."""
    if root is None or Path(root).resolve() == REPO:
        return KraftyNode
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"krafty_node_{abs(hash(str(root)))}",
                                                  Path(root) / "tests" / "integration" / "krafty_node.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.KraftyNode


def make_node(workdir: str | Path, *, memory_limit_mb: int | None = 1536, advertise: dict[str, int] | None = None,
              overrides: dict[str, str] | None = None, root: Path | None = None) -> tuple[KraftyNode, int]:
    """A node (not started) and its SASL_PLAINTEXT port. ``advertise`` maps listener name to
    the port to advertise instead (the recorder's proxies); ``root`` runs the node of another
    checkout (with that checkout's .venv when it has one)."""
    os.environ.setdefault("PYTHONFAULTHANDLER", "1")  # a native crash leaves every thread's stack in the log
    node = _node_class(root)(workdir, memory_limit_mb=memory_limit_mb)
    sasl_port = free_port()
    ports = {"PLAINTEXT": node.port, "SASL_PLAINTEXT": sasl_port}
    adv = {**ports, **(advertise or {})}
    node.extra_properties = {
        "listeners": f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port},"
                     f"SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "advertised.listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in adv.items()),
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN," + ",".join(SCRAM_MECHANISMS),
        "sasl.jaas.config": jaas_plain(),
        "authorizer.class.name": AUTHORIZER,
        "super.users": f"User:ANONYMOUS;User:{ADMIN[0]}",
        "allow.everyone.if.no.acl.found": "true",
        "group.initial.rebalance.delay.ms": "0",
        "log.cleaner.backoff.ms": "1000",
        "offsets.topic.num.partitions": "3",
        "offsets.topic.replication.factor": "1",
        "connection.failed.authentication.delay.ms": "0",
        **(overrides or {}),
    }
    return node, sasl_port


def create_topics(bootstrap: str, names: dict[str, tuple[int, dict[str, str]]] | None = None,
                  timeout: float = 30.0) -> None:
    """Creates the fuzz topics (and the canary's); existing ones are left as they are."""
    from confluent_kafka.admin import AdminClient, NewTopic

    names = names if names is not None else {**TOPICS, CANARY_TOPIC: (1, {})}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futs = admin.create_topics([NewTopic(n, p, 1, config=c) for n, (p, c) in names.items()],
                               operation_timeout=timeout)
    for name, f in futs.items():
        try:
            f.result(timeout)
        except Exception as e:  # noqa: BLE001 - only "already exists" is fine
            if "already exists" not in str(e).lower() and "TOPIC_ALREADY_EXISTS" not in str(e):
                raise RuntimeError(f"cannot create fuzz topic {name}: {e}") from None


def topic_ids(bootstrap: str, timeout: float = 30.0) -> dict[str, uuid.UUID]:
    """The node's ids of the fuzz topics."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    out = {}
    for name, f in admin.describe_topics(TopicCollection(list(TOPICS))).items():
        tid = f.result(timeout).topic_id
        out[name] = uuid.UUID(int=(tid.get_most_significant_bits() % (1 << 64)) << 64
                              | tid.get_least_significant_bits() % (1 << 64))
    return out


class TopicIdSwap:
    """Rewrites the 16 bytes of each topic id of ``pairs`` (old -> new) wherever they occur in a
    frame (another 16-byte run equal to a random UUID is not a concern)."""

    def __init__(self, pairs: dict[uuid.UUID, uuid.UUID]):
        self.pairs = [(a.bytes, b.bytes) for a, b in pairs.items() if a != b]

    def __call__(self, frame: bytes) -> bytes:
        for a, b in self.pairs:
            if a in frame:
                frame = frame.replace(a, b)
        return frame


def to_node_ids(bootstrap: str) -> TopicIdSwap:
    """Corpus topic ids -> the node's."""
    ids = topic_ids(bootstrap)
    return TopicIdSwap({CORPUS_TOPIC_IDS[n]: ids[n] for n in TOPICS})


def create_scram_users(bootstrap: str, timeout: float = 30.0) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    ups = [UserScramCredentialUpsertion(u, ScramCredentialInfo(getattr(ScramMechanism, m.replace("-", "_")), 4096),
                                        pw.encode())
           for u, pw in USERS.items() for m in SCRAM_MECHANISMS]
    for f in admin.alter_user_scram_credentials(ups).values():
        f.result(timeout)
