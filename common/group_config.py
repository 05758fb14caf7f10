"""The configs of one group (Kafka's GroupConfig, KIP-848): ConfigRecords of resource type GROUP
(32) in the metadata log, set with IncrementalAlterConfigs and read with DescribeConfigs. A key a
group does not set takes the broker's ``group.consumer.*`` default; a value must lie within the
broker's ``group.consumer.min/max.*`` bounds, and a group's session timeout must exceed its
heartbeat interval (checked on the configs the group would have after the change, as Kafka's
GroupConfig.validate). Pure: no I/O."""

from __future__ import annotations

import re
from collections.abc import Mapping

from common.dynamic_config import DynamicConfigError

# group key -> the broker key that is its default (and whose min/max bound it)
GROUP_KEYS = {
    "consumer.session.timeout.ms": "group.consumer.session.timeout.ms",
    "consumer.heartbeat.interval.ms": "group.consumer.heartbeat.interval.ms",
    # share groups (KIP-932)
    "share.session.timeout.ms": "group.share.session.timeout.ms",
    "share.heartbeat.interval.ms": "group.share.heartbeat.interval.ms",
    "share.record.lock.duration.ms": "group.share.record.lock.duration.ms",
    "share.delivery.count.limit": "group.share.delivery.count.limit",
}
# string group keys (share groups): key -> (default, check returning an error message or None)
_ISO_DURATION = re.compile(r"^P(?:\d+D)?(?:T(?:\d+H)?(?:\d+M)?(?:\d+(?:\.\d+)?S)?)?$")


def _auto_offset_reset(v: str) -> str | None:
    lv = v.strip().lower()
    if lv in ("earliest", "latest"):
        return None
    if lv.startswith("by_duration:") and _ISO_DURATION.match(v.strip()[len("by_duration:"):].upper()) \
            and len(v.strip()) > len("by_duration:P"):
        return None
    return "must be earliest, latest or by_duration:<ISO-8601 duration> (e.g. by_duration:PT1H)"


STRING_KEYS = {
    "share.auto.offset.reset": ("latest", _auto_offset_reset),
    "share.isolation.level": ("read_uncommitted", lambda v: None if v in ("read_uncommitted", "read_committed")
                              else "must be read_uncommitted or read_committed"),
}
CONFIG_TYPE_INT = 3  # DescribeConfigs ConfigType
CONFIG_TYPE_STRING = 2


def _bound(broker_key: str, which: str) -> str:
    if broker_key.startswith("group.share."):
        return broker_key.replace("group.share.", f"group.share.{which}.", 1)
    return broker_key.replace("group.consumer.", f"group.consumer.{which}.", 1)


def group_config(cfg, overrides: Mapping[str, str]) -> dict[str, int | str]:
    """Every group key's value for a group with these stored ``overrides`` (broker defaults else)."""
    out: dict[str, int | str] = {k: int(overrides[k]) if k in overrides else cfg[b] for k, b in GROUP_KEYS.items()}
    out.update({k: overrides.get(k, d) for k, (d, _) in STRING_KEYS.items()})
    return out


def validate_names(props: Mapping[str, object]) -> None:
    unknown = [k for k in props if k not in GROUP_KEYS and k not in STRING_KEYS]
    if unknown:
        raise DynamicConfigError("INVALID_CONFIG", f"Unknown group config name: {unknown[0]}")


def validate_group_config(cfg, props: Mapping[str, str]) -> None:
    """The group's stored configs after a change (``props``: key -> value) against this node's
    ``cfg``; raises DynamicConfigError INVALID_CONFIG with Kafka's message."""
    validate_names(props)
    for k, v in props.items():
        if k in STRING_KEYS:
            why = STRING_KEYS[k][1](str(v))
            if why:
                raise DynamicConfigError("INVALID_CONFIG", f"Invalid value {v} for configuration {k}: {why}")
            continue
        try:
            n = int(v)
        except (TypeError, ValueError):
            raise DynamicConfigError("INVALID_CONFIG", f"Invalid value {v} for configuration {k}: "
                                                       "Not a number of type INT") from None
        if not 1 <= n < 2**31:
            why = "Value must be at least 1" if n < 1 else "Not a number of type INT"
            raise DynamicConfigError("INVALID_CONFIG", f"Invalid value {v} for configuration {k}: {why}")
    values = group_config(cfg, props)
    for k, broker_key in GROUP_KEYS.items():
        lo, hi = _bound(broker_key, "min"), _bound(broker_key, "max")
        if values[k] < cfg[lo]:
            raise DynamicConfigError("INVALID_CONFIG", f"{k} must be greater than or equal to {lo}")
        if values[k] > cfg[hi]:
            raise DynamicConfigError("INVALID_CONFIG", f"{k} must be less than or equal to {hi}")
    for kind in ("consumer", "share"):
        if values[f"{kind}.session.timeout.ms"] <= values[f"{kind}.heartbeat.interval.ms"]:
            raise DynamicConfigError("INVALID_CONFIG", f"{kind}.session.timeout.ms must be greater than "
                                                       f"{kind}.heartbeat.interval.ms")
