"""``krafty.log.format=json``: one JSON object per log line, for log shippers.

    {"time": "2026-11-23T10:00:00.123Z", "level": "INFO", "logger": "krafty.replica", "node_id": 4,
     "message": "t-0: leader in epoch 3 at offset 0, ISR [4, 5, 6]", "topic": "t", "partition": 0}

Context fields are the ``extra`` a log call passes (``log.info(..., extra={"topic": t,
"partition": p})``); an exception adds ``exception`` (its traceback). Stdlib only."""

from __future__ import annotations

import datetime
import json
import logging

# attributes every LogRecord has: anything else on a record came from ``extra``
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def __init__(self, node_id: int | None = None):
        super().__init__()
        self.node_id = node_id

    def format(self, record: logging.LogRecord) -> str:
        t = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        out = {"time": t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z",
               "level": record.levelname, "logger": record.name}
        if self.node_id is not None:
            out["node_id"] = self.node_id
        out["message"] = record.getMessage()
        for k, v in record.__dict__.items():
            if k not in _STANDARD and k not in out:
                out[k] = v if isinstance(v, str | int | float | bool | type(None)) else str(v)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, ensure_ascii=False)


def use_json_logs(node_id: int | None = None) -> None:
    """Switches every handler of the root logger to JSON lines."""
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig()
    for h in root.handlers:
        h.setFormatter(JsonFormatter(node_id))
