"""Client quota entities and keys (Kafka's ClientQuotaEntity / QuotaConfigs), shared by the
controller (validation) and the broker (DescribeClientQuotas, enforcement)."""

from __future__ import annotations

ENTITY_TYPES = ("user", "client-id", "ip")
# quota key -> the entity types it applies to
KEYS: dict[str, tuple[str, ...]] = {
    "producer_byte_rate": ("user", "client-id"),
    "consumer_byte_rate": ("user", "client-id"),
    "request_percentage": ("user", "client-id"),
    "controller_mutation_rate": ("user", "client-id"),
    "connection_creation_rate": ("ip",),
}
# the keys krafty's brokers enforce; the others are Kafka's but would be stored and ignored,
# so the controller refuses them rather than pretend
ENFORCED = frozenset({"producer_byte_rate", "consumer_byte_rate"})

Entity = tuple[tuple[str, str | None], ...]  # sorted ((type, name or None = default), ...)
