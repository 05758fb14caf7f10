"""Consumer lag in seconds, estimated from the history of a partition's high watermark (pure).

The lag in records is the high watermark minus the committed offset. The lag in seconds is
how long ago the first record the group has not consumed (the one at its committed offset)
was appended: ``now - t`` where ``t`` is when the high watermark first went past the
committed offset. Reading that record's timestamp from the log would cost a random read per
group and partition at every scrape; instead the coordinator keeps, per partition, a short
timeline of (high watermark, time first seen) samples taken every few seconds, and
interpolates ``t`` between the two samples around the committed offset (kafka-lag-exporter's
method). A committed offset older than the timeline is extrapolated with the timeline's
average rate; a group at the high watermark has no lag."""

from __future__ import annotations

MAX_SAMPLES = 120


class OffsetTimeline:
    """(high watermark, wall ms when first seen) of one partition, oldest first."""

    __slots__ = ("samples",)

    def __init__(self) -> None:
        self.samples: list[tuple[int, int]] = []

    @property
    def latest(self) -> int | None:
        return self.samples[-1][0] if self.samples else None

    def observe(self, hw: int, now_ms: int) -> None:
        s = self.samples
        if s and hw <= s[-1][0]:
            if hw < s[-1][0]:  # the log was truncated or recreated: start again
                s.clear()
                s.append((hw, now_ms))
            return
        s.append((hw, now_ms))
        if len(s) > MAX_SAMPLES:
            del s[0]

    def lag_seconds(self, committed: int, now_ms: int) -> float:
        """Seconds since the record at ``committed`` was appended (0 when the group is at the end)."""
        s = self.samples
        if not s or committed >= s[-1][0]:
            return 0.0
        target = committed + 1  # the high watermark passed the record when it reached committed + 1
        i = next(i for i, (o, _) in enumerate(s) if o >= target)
        o1, t1 = s[i]
        if i == 0:  # older than the timeline: extrapolate at its average rate
            o_last, t_last = s[-1]
            if len(s) < 2 or o_last == o1 or t_last == t1:
                t = t1
            else:
                rate = (o_last - o1) / (t_last - t1)
                t = t1 - (o1 - target) / rate
        else:
            o0, t0 = s[i - 1]
            t = t0 + (target - o0) * (t1 - t0) / (o1 - o0)
        return max(0.0, (now_ms - t) / 1000)
