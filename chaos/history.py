"""The history of a chaos run: every client operation and fault, time-stamped (seconds since the
run started), appended from many threads. ``chaos/checker.py`` documents the event shapes."""

from __future__ import annotations

import json
import threading
import time


class History:
    def __init__(self):
        self.t0 = time.monotonic()
        self.wall0 = time.time()
        self.ops: list[dict] = []
        self._lock = threading.Lock()

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 4)

    def add(self, f: str, **fields) -> dict:
        op = {"f": f, "t": fields.pop("t", None) or self.now(), **fields}
        with self._lock:
            self.ops.append(op)
        return op

    def snapshot(self) -> list[dict]:
        with self._lock:
            return list(self.ops)

    def dump(self, path: str) -> None:
        ops = self.snapshot()
        ops.sort(key=lambda o: o["t"])
        with open(path, "w") as f:
            for op in ops:
                f.write(json.dumps(op, separators=(",", ":")) + "\n")


def load(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
