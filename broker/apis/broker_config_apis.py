"""DescribeConfigs / AlterConfigs / IncrementalAlterConfigs of BROKER and BROKER_LOGGER
resources: the dynamic broker configs (common/dynamic_config.py, stored by the controller as
ConfigRecords, applied by broker/dynamic_config.py) and the run-time log levels
(broker/runtime_loggers.py). Kafka's ConfigHelper and ConfigAdminManager."""

from __future__ import annotations

from broker import runtime_loggers
from common.config import KEYS, Config, ConfigError, is_sensitive
from common.dynamic_config import (
    SOURCE_DEFAULT,
    SOURCE_DYNAMIC_BROKER_LOGGER,
    SOURCE_DYNAMIC_DEFAULT_BROKER,
    DynamicConfigError,
    apply_ops,
    broker_synonyms,
    config_synonyms,
    default_string,
    is_dynamic,
    validate_change,
)
from common.errors import ErrorCode, KafkaError
from metadata import records as r

BROKER, BROKER_LOGGER = 4, 8
CONFIG_TYPE_PASSWORD = 9


def config_str(v) -> str | None:
    """A parsed config value as Kafka prints it."""
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return ",".join(str(x) if not hasattr(x, "port") else f"{x.name}://{x.host}:{x.port}" for x in v)
    if isinstance(v, dict):
        return ",".join(f"{k}:{x}" for k, x in v.items())
    return str(v)


def config_type(key) -> int:
    """DescribeConfigs ConfigType of a key (BOOLEAN 1, STRING 2, LONG 5, LIST 7)."""
    name = getattr(key.parse, "__name__", "")
    return {"_bool": 1, "_int": 5, "_list": 7, "_cleanup_policy": 7}.get(name, 2)


def broker_key_synonyms(cfg: Config, name: str) -> list[tuple[str, str | None, int]]:
    """(name, value, source) of every synonym of a broker key that is set, best first."""
    return config_synonyms(cfg, name, broker_synonyms(name), static_default=default_string)


class BrokerConfigApis:
    """Mixin of KafkaApis (broker/apis/kafka_apis.py), called by AdminApis' config handlers."""

    def _own_broker_id(self, name: str, what: str = "broker") -> None:
        try:
            requested = int(name)
        except ValueError:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}") from None
        if requested != self.broker_id:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unexpected {what} id, expected {self.broker_id}"
                             f"{' or empty string' if what == 'broker' else ''}, but received {name}")

    # --- DescribeConfigs ------------------------------------------------------------------
    def describe_broker_configs(self, name: str, wanted: set[str] | None, synonyms: bool) -> list[dict]:
        cfg = self.config
        if name == "":  # the cluster-wide dynamic defaults only
            return [self._broker_entry(k, v, synonyms, per_broker=False) for k, v in sorted(cfg.dynamic_default.items())
                    if wanted is None or k in wanted]
        self._own_broker_id(name)
        # every declared key, and the listener-prefixed ones that were set (as Kafka lists them)
        listener_keys = {k for layer in (cfg.explicit, cfg.dynamic_default, cfg.dynamic_broker) for k in layer
                         if k.startswith("listener.name.") and k not in KEYS and k not in cfg.unknown}
        out = []
        for k in sorted([*KEYS, *listener_keys]):
            if wanted is not None and k not in wanted:
                continue
            if k in KEYS:
                v = config_str(cfg[k])
            else:
                v = next(layer[k] for layer in (cfg.dynamic_broker, cfg.dynamic_default, cfg.explicit) if k in layer)
            out.append(self._broker_entry(k, v, synonyms, per_broker=True))
        return out

    def _broker_entry(self, name: str, value: str | None, include_synonyms: bool, per_broker: bool) -> dict:
        """Kafka's createBrokerConfigEntry: the source is the best synonym's; a secret (a
        PASSWORD-type key, or one named like it) has a null value, also in its synonyms."""
        sensitive = is_sensitive(name)
        syn = broker_key_synonyms(self.config, name)
        if not per_broker:
            syn = [s for s in syn if s[2] == SOURCE_DYNAMIC_DEFAULT_BROKER]
        key = KEYS.get(name)
        ctype = CONFIG_TYPE_PASSWORD if sensitive else config_type(key) if key is not None else 2
        if sensitive:
            value = None
        return {"name": name, "value": value, "read_only": not is_dynamic(name),
                "config_source": syn[0][2] if syn else SOURCE_DEFAULT, "is_sensitive": sensitive,
                "synonyms": [{"name": n, "value": None if sensitive else v, "source": s} for n, v, s in syn]
                if include_synonyms else [], "config_type": ctype}

    def describe_broker_loggers(self, name: str, wanted: set[str] | None) -> list[dict]:
        if name == "":
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Broker id must not be empty")
        self._own_broker_id(name, "broker")
        return [{"name": lg, "value": level, "read_only": False, "config_source": SOURCE_DYNAMIC_BROKER_LOGGER,
                 "is_sensitive": False, "synonyms": [], "config_type": 2}
                for lg, level in runtime_loggers.loggers().items() if wanted is None or lg in wanted]

    # --- AlterConfigs / IncrementalAlterConfigs --------------------------------------------
    async def alter_broker_configs(self, name: str, ops: list[tuple[str, int, str | None]], validate_only: bool,
                                   *, legacy: bool = False) -> None:
        """Checks the change against this broker's configuration (a named broker must be this
        one), then has the controller store it. ``legacy`` (AlterConfigs): the given keys
        replace every dynamic config of the resource."""
        _check_ops(ops)
        if name != "":
            self._own_broker_id(name)
        current = self.image.configs.get((r.RESOURCE_BROKER, name), {})
        if legacy:
            given = {k for k, _, _ in ops}
            ops = [*ops, *((k, 1, None) for k in current if k not in given)]
        try:
            changes = apply_ops(current, ops)
            props = {k: v for k, v in {**current, **changes}.items() if v is not None}
            validate_change(self.config, {k: v for k, v in props.items() if k in changes}, per_broker=name != "")
        except DynamicConfigError as e:
            raise KafkaError(ErrorCode[e.code], e.message) from None
        if name != "":
            self._check_listener_security(props)
        await self.controller.alter_broker_configs(name, ops, validate_only)

    def _check_listener_security(self, broker_props: dict[str, str]) -> None:
        """A per-broker change of TLS/SASL settings is tried before it is stored: a keystore that
        cannot be read, or a JAAS config that does not parse, is refused (INVALID_REQUEST)."""
        if not any(k.startswith(("listener.name.", "ssl.", "sasl.")) for k in broker_props):
            return
        from broker.security.sasl import listener_security

        cfg = self.config
        try:
            trial = Config({**cfg.explicit, **cfg.dynamic_default, **broker_props}, warn_unknown=False)
            ctrl = set(trial["controller.listener.names"])
            for lst in trial["listeners"]:
                if lst.name not in ctrl:
                    listener_security(trial, lst.name)
        except ConfigError as e:
            raise KafkaError(ErrorCode.INVALID_REQUEST, str(e)) from None

    def alter_broker_loggers(self, name: str, ops, validate_only: bool) -> None:
        _check_ops(ops)
        if name == "":
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Broker id must not be empty")
        self._own_broker_id(name, "node")
        runtime_loggers.validate(ops)
        if not validate_only:
            runtime_loggers.apply(ops)


def _check_ops(ops) -> None:
    """Kafka's ConfigAdminManager.preprocess checks of one resource."""
    names = [n for n, _, _ in ops]
    if len(set(names)) != len(names):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    nulls = [n for n, op, v in ops if op != 1 and v is None]
    if nulls:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {', '.join(nulls)}")

