"""DescribeConfigs / AlterConfigs / IncrementalAlterConfigs of GROUP resources (KIP-848): a
group's ``consumer.session.timeout.ms`` and ``consumer.heartbeat.interval.ms``, stored by the
controller as ConfigRecords of resource type GROUP (common/group_config.py). Kafka's ConfigHelper
(createGroupConfigEntry) and GroupConfig.validate."""

from __future__ import annotations

from common.dynamic_config import SOURCE_DEFAULT, DynamicConfigError, apply_ops
from common.errors import ErrorCode, KafkaError
from common.group_config import (
    CONFIG_TYPE_INT,
    CONFIG_TYPE_STRING,
    GROUP_KEYS,
    group_config,
    validate_group_config,
)
from metadata import records as r

GROUP = 32
SOURCE_GROUP_CONFIG = 8  # DescribeConfigs ConfigSource GROUP_CONFIG


class GroupConfigApis:
    """Mixin of KafkaApis (broker/apis/kafka_apis.py), called by AdminApis' config handlers."""

    def describe_group_configs(self, name: str, wanted: set[str] | None, synonyms: bool) -> list[dict]:
        """Every group key: the group's value (GROUP_CONFIG) or the broker default (DEFAULT_CONFIG);
        a group that does not exist has the defaults, as in Kafka."""
        if not name:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Group name must not be empty")
        overrides = self.image.configs.get((r.RESOURCE_GROUP, name), {})
        out = []
        for k, v in group_config(self.config, overrides).items():
            if wanted is not None and k not in wanted:
                continue
            source = SOURCE_GROUP_CONFIG if k in overrides else SOURCE_DEFAULT
            out.append({"name": k, "value": str(v), "read_only": False, "config_source": source,
                        "is_sensitive": False,
                        "config_type": CONFIG_TYPE_INT if isinstance(v, int) else CONFIG_TYPE_STRING,
                        "synonyms": [{"name": k, "value": str(v), "source": source}] if synonyms else []})
        return out

    async def alter_group_configs(self, name: str, ops: list[tuple[str, int, str | None]], validate_only: bool,
                                  *, legacy: bool = False) -> None:
        """Checks the configs the group would have against this broker's group.consumer.* bounds,
        then has the controller store the change. ``legacy`` (AlterConfigs): the given keys
        replace every config of the group."""
        if not name:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Default group resources are not allowed.")
        current = self.image.configs.get((r.RESOURCE_GROUP, name), {})
        if legacy:
            given = {k for k, _, _ in ops}
            ops = [*ops, *((k, 1, None) for k in current if k not in given)]
        nulls = [k for k, op, v in ops if op != 1 and v is None]
        if nulls:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Null value not supported for group configs: {','.join(nulls)}")
        try:
            changes = apply_ops(current, ops, resource="group")
            validate_group_config(self.config, {k: v for k, v in {**current, **changes}.items() if v is not None})
        except DynamicConfigError as e:
            raise KafkaError(ErrorCode[e.code], e.message) from None
        await self.controller.alter_group_configs(name, ops, validate_only)


__all__ = ["GROUP", "GROUP_KEYS", "GroupConfigApis", "SOURCE_GROUP_CONFIG"]
