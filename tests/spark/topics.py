"""Reading a whole output topic back in the Spark suite's checks (a confluent-kafka consumer)."""

from __future__ import annotations

import time
import uuid


def read_values(bootstrap: str, topic: str, partitions: int, read_committed: bool = True,
                idle_s: float = 3.0) -> list[bytes]:
    """Every value of ``topic`` from offset 0, once nothing new arrived for ``idle_s`` seconds."""
    import confluent_kafka as ck

    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"chk-{uuid.uuid4().hex[:6]}",
                     "enable.auto.commit": False,
                     "isolation.level": "read_committed" if read_committed else "read_uncommitted"})
    try:
        c.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
        out, last = [], time.monotonic()
        while time.monotonic() - last < idle_s:
            msgs = [m for m in c.consume(1000, 0.5) if m.error() is None]
            if msgs:
                out += [m.value() for m in msgs]
                last = time.monotonic()
        return out
    finally:
        c.close()
