"""Kafka's rules for topic names."""

from __future__ import annotations

import re

from common.errors import ErrorCode, KafkaError

MAX_NAME_LENGTH = 249
# Kafka's Topic.INTERNAL_TOPICS: written by coordinators only; clients may neither create,
# delete nor repartition them. The metadata log's name is reserved too (its directory sits in
# the first log dir, where a partition log of that name would collide with it).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
CLUSTER_METADATA_TOPIC = "__cluster_metadata"
RESERVED_TOPICS = INTERNAL_TOPICS | {CLUSTER_METADATA_TOPIC}
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name: str | None) -> None:
    """Raises KafkaError(INVALID_TOPIC_EXCEPTION) with Kafka's message for an illegal name."""
    if not name:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name cannot be \".\" or \"..\"")
    if len(name) > MAX_NAME_LENGTH:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         f"Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters, "
                         f"topic name: {name}")
    if not _LEGAL.fullmatch(name):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         f"Topic name \"{name}\" is illegal, it contains a character other than ASCII "
                         "alphanumerics, '.', '_' and '-'")


def collision_key(name: str) -> str:
    """Topics whose names differ only by '.' vs '_' collide in metric names; Kafka refuses them."""
    return name.replace(".", "_")
