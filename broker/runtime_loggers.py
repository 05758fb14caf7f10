"""BROKER_LOGGER: the log levels of this node's loggers, read and set at run time through
DescribeConfigs / IncrementalAlterConfigs (Kafka's RuntimeLoggerManager and Log4jController).
Not persisted: a restart goes back to the configured levels, as in Kafka."""

from __future__ import annotations

import logging

from common.errors import ErrorCode, KafkaError

ROOT = "root"  # Kafka's name of the root logger
# Kafka's level names (LogLevelConfig.VALID_LOG_LEVELS) and Python's levels
LEVELS = {"TRACE": 5, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING,
          "ERROR": logging.ERROR, "FATAL": logging.CRITICAL}
_NAMES = {v: k for k, v in LEVELS.items()}
VALID = ", ".join(sorted(LEVELS))


def level_name(level: int) -> str:
    if level in _NAMES:
        return _NAMES[level]
    return _NAMES[min((lv for lv in _NAMES if lv >= level), default=logging.CRITICAL)]


def loggers() -> dict[str, str]:
    """Every logger of the process with its effective level (the root logger as ``root``)."""
    out = {ROOT: level_name(logging.getLogger().getEffectiveLevel())}
    for name, lg in sorted(logging.root.manager.loggerDict.items()):
        if isinstance(lg, logging.Logger):
            out[name] = level_name(lg.getEffectiveLevel())
    return out


def _logger(name: str) -> logging.Logger:
    if name == ROOT:
        return logging.getLogger()
    lg = logging.root.manager.loggerDict.get(name)
    if not isinstance(lg, logging.Logger):
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Logger {name} does not exist!")
    return lg


def validate(ops) -> None:
    """``ops``: (logger, op, level) with op 0 SET, 1 DELETE; APPEND and SUBTRACT are refused."""
    for name, op, value in ops:
        if op == 0:
            _logger(name)
            if value not in LEVELS:
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"Cannot set the log level of {name} to {value} as it "
                                 f"is not a supported log level. Valid log levels are {VALID}")
        elif op == 1:
            _logger(name)
            if name == ROOT:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Removing the log level of the {ROOT} logger is not "
                                 "allowed")
        elif op in (2, 3):
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"{'APPEND' if op == 2 else 'SUBTRACT'} operation is not "
                             "allowed for the BROKER_LOGGER resource")
        else:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown operation type {op} is not allowed for the "
                             "BROKER_LOGGER resource")


def apply(ops) -> None:
    """SET gives the logger its own level; DELETE makes it inherit its parent's again."""
    log = logging.getLogger("krafty.loggers")
    for name, op, value in ops:
        lg = _logger(name)
        if op == 0:
            lg.setLevel(LEVELS[value])
            log.warning("Updated the log level of %s to %s", name, value)
        else:
            lg.setLevel(logging.NOTSET)
            log.warning("Unset the log level of %s", name)
