"""Helpers for the log tests that open real logs: config, produce, read everything back, crash."""

from __future__ import annotations

from batch_builder import make_batch

from broker.log import Log, LogConfig, parse_batches, validate_produce_batches
from broker.log.batch import decode_records
from common.errors import KafkaError

MAX = 1 << 20


def cfg(**kw):
    return LogConfig.from_topic_configs({k.replace("_", "."): v for k, v in kw.items()})


def open_log(d, config=None, **kw):
    return Log.open(str(d), "t", 0, config or cfg(), now_ms=0, **kw)


def produce(log, values, **kw):
    buf = make_batch(values, **kw)
    return log.append_as_leader(buf, validate_produce_batches(buf, MAX), 0, 0)


def all_values(log, skip_errors: bool = False):
    """Every record value from the log start, as a consumer reads them. ``skip_errors``: step
    over an offset whose read fails (what an operator's consumer does past a corrupt batch)."""
    out = []
    off = log.log_start_offset
    while off < log.log_end_offset:
        try:
            s = log.read(off, MAX, log.log_end_offset)
        except KafkaError:
            if not skip_errors:
                raise
            off += 1
            continue
        if s is None:
            break
        data = log.read_bytes(s)
        for h in parse_batches(data):
            out += [r.value for r in decode_records(data[h.pos:h.pos + h.size])]
            off = h.last_offset + 1
    return out


def crash(log):
    """Drop the log without close(): no seal, no index write-out, no snapshot."""
    for s in log.segments:
        s.release()
