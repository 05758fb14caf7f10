"""Dynamic broker configs and group configs on the controller (Kafka's
ConfigurationControlManager for BROKER and GROUP resources): IncrementalAlterConfigs ops become ConfigRecords. The broker that received the
request has checked the keys and values against its own configuration (common/dynamic_config.py,
as Kafka's ConfigAdminManager does); here only the resource name is checked, as Kafka's
ControllerConfigurationValidator does. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from common.dynamic_config import DynamicConfigError, apply_ops
from common.errors import ErrorCode, KafkaError
from common.group_config import validate_names
from metadata import records as r
from metadata.image import MetadataImage


def validate_broker_name(name: str) -> None:
    """"" (the cluster default) or a non-negative broker id, with Kafka's messages."""
    if name == "":
        return
    try:
        broker_id = int(name, 10)
    except ValueError:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Unable to parse broker name as a base 10 number.") from None
    if broker_id < 0:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Invalid negative broker ID.")


def alter_broker_configs(image: MetadataImage, name: str, ops: Sequence[tuple[str, int, str | None]]
                         ) -> list[r.ConfigRecord]:
    """One record per key named, even when its value does not change: a broker reloads what
    the key names (a keystore rewritten in place) when it sees the record (KAFKA-14136)."""
    validate_broker_name(name)
    try:
        new = apply_ops(image.configs.get((r.RESOURCE_BROKER, name), {}), ops)
    except DynamicConfigError as e:
        raise KafkaError(ErrorCode[e.code], e.message) from None
    return [r.ConfigRecord(r.RESOURCE_BROKER, name, k, v) for k, v in new.items()]


def alter_group_configs(image: MetadataImage, name: str, ops: Sequence[tuple[str, int, str | None]]
                        ) -> list[r.ConfigRecord]:
    """A group's configs (KIP-848): the broker checked the values against its group.consumer.*
    bounds; here the name and the keys, as Kafka's ControllerConfigurationValidator."""
    if name == "":
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Default group resources are not allowed.")
    try:
        new = apply_ops(image.configs.get((r.RESOURCE_GROUP, name), {}), ops, resource="group")
        validate_names(new)
    except DynamicConfigError as e:
        raise KafkaError(ErrorCode[e.code], e.message) from None
    return [r.ConfigRecord(r.RESOURCE_GROUP, name, k, v) for k, v in new.items()]
