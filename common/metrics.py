"""The hot-path side of krafty's metrics: plain counters and latency histograms that cost an
attribute increment or a list increment per event, with no lock and no allocation.

The Prometheus side (the registry, the exposition format, the HTTP endpoint) reads these at
scrape time (krafty/metrics_server.py, broker/metrics.py, controller/metrics.py): the way the
JMX exporter reads Kafka's MBeans. Stdlib only, as everything in common/.

Latency histograms stand in for Kafka's Yammer histograms (an exponentially decaying reservoir
biased to the last five minutes): log-linear buckets, 8 per power of two of microseconds (a
quantile is within ~6 % of the true value), counted in two windows of ``window_s`` seconds;
quantiles are read over the current and the previous window, so they describe the last one to
two windows, while ``count`` and ``sum`` cover the whole life of the process."""

from __future__ import annotations

from collections.abc import Iterator

# Kafka's histogram percentiles, as the JMX exporter names them (50thPercentile -> "0.50")
QUANTILES: tuple[tuple[str, float], ...] = (("0.50", 0.50), ("0.75", 0.75), ("0.95", 0.95), ("0.98", 0.98),
                                            ("0.99", 0.99), ("0.999", 0.999))

_SUB = 8  # buckets per power of two
_EXACT = 16  # below 16 us every microsecond has its bucket
_MAX_BITS = 40  # 2^40 us (12 days): everything longer shares the last bucket
NUM_BUCKETS = _EXACT + (_MAX_BITS - 4) * _SUB


def bucket_of(us: int) -> int:
    """The bucket of a duration in whole microseconds."""
    if us < _EXACT:
        return us if us > 0 else 0
    b = us.bit_length()  # 8 buckets per power of two: the top 4 bits of the duration
    if b > _MAX_BITS:
        return NUM_BUCKETS - 1
    return _EXACT + (b - 5) * _SUB + ((us >> (b - 4)) & 7)


def bucket_bounds(i: int) -> tuple[float, float]:
    """[low, high) of bucket ``i`` in microseconds."""
    if i < _EXACT:
        return float(i), float(i + 1)
    b = (i - _EXACT) // _SUB + 5
    sub = (i - _EXACT) % _SUB
    return float((8 + sub) << (b - 4)), float((9 + sub) << (b - 4))


class Histogram:
    """Durations (seconds in, milliseconds out, as Kafka's *TimeMs histograms)."""

    __slots__ = ("cur", "prev", "count", "sum", "rotated_at", "window_s")

    def __init__(self, window_s: float = 60.0, now: float = 0.0):
        self.cur = [0] * NUM_BUCKETS
        self.prev: list[int] | None = None
        self.count = 0
        self.sum = 0.0  # seconds
        self.rotated_at = now
        self.window_s = window_s

    def record(self, seconds: float) -> None:
        self.count += 1
        self.sum += seconds
        us = int(seconds * 1_000_000)
        if us < _EXACT:
            self.cur[us if us > 0 else 0] += 1
        else:
            self.cur[bucket_of(us)] += 1

    def rotate(self, now: float) -> None:
        """Starts a new window when the current one is over (called when read)."""
        age = now - self.rotated_at
        if age < self.window_s:
            return
        self.prev = self.cur if age < 2 * self.window_s else None
        self.cur = [0] * NUM_BUCKETS
        self.rotated_at = now

    def quantiles_ms(self, now: float) -> list[tuple[str, float]]:
        """Kafka's percentiles over the last one or two windows, in milliseconds (0 when empty)."""
        self.rotate(now)
        counts = self.cur if self.prev is None else [a + b for a, b in zip(self.cur, self.prev, strict=True)]
        total = sum(counts)
        out = []
        if total == 0:
            return [(label, 0.0) for label, _ in QUANTILES]
        it = iter(QUANTILES)
        label, q = next(it)
        seen = 0
        for i, c in enumerate(counts):
            if not c:
                continue
            seen += c
            while seen >= q * total:
                lo, hi = bucket_bounds(i)
                out.append((label, (lo if i < _EXACT else (lo + hi) / 2) / 1000))
                nxt = next(it, None)
                if nxt is None:
                    return out
                label, q = nxt
        while len(out) < len(QUANTILES):  # rounding: the rest are the top bucket
            out.append((QUANTILES[len(out)][0], out[-1][1] if out else 0.0))
        return out

    @property
    def sum_ms(self) -> float:
        return self.sum * 1000


class WindowedStat:
    """Kafka's windowed ``-avg`` / ``-max`` / ``-rate`` (a SampledStat over two windows): values
    recorded in the current and the previous window of ``window_s`` seconds."""

    __slots__ = ("window_s", "started", "cur", "prev")

    def __init__(self, window_s: float = 30.0, now: float = 0.0):
        self.window_s = window_s
        self.started = now
        self.cur = [0, 0.0, 0.0]  # count, sum, max
        self.prev: list | None = None

    def record(self, value: float, now: float) -> None:
        if now - self.started >= self.window_s:
            self._rotate(now)
        c = self.cur
        c[0] += 1
        c[1] += value
        if value > c[2]:
            c[2] = value

    def _rotate(self, now: float) -> None:
        self.prev = self.cur if now - self.started < 2 * self.window_s else None
        self.cur = [0, 0.0, 0.0]
        self.started = now

    def _windows(self, now: float) -> list[list]:
        if now - self.started >= self.window_s:
            self._rotate(now)
        return [self.cur] if self.prev is None else [self.cur, self.prev]

    def avg(self, now: float) -> float:
        ws = self._windows(now)
        n = sum(w[0] for w in ws)
        return sum(w[1] for w in ws) / n if n else 0.0

    def max(self, now: float) -> float:
        return max(w[2] for w in self._windows(now))

    def rate(self, now: float) -> float:
        """Sum of the values per second over the windows (at least one window's length)."""
        ws = self._windows(now)
        span = max(now - self.started + (self.window_s if self.prev is not None else 0.0), self.window_s)
        return sum(w[1] for w in ws) / span


def summary_samples(name: str, series, now: float) -> list[tuple[str, dict[str, str], float]]:
    """The samples of a Prometheus summary with Kafka's percentiles (what the JMX exporter makes
    of a Yammer histogram: ``name{quantile="0.99"}``), plus ``_count`` and ``_sum`` (ms), for
    ``series``: [(labels, Histogram)]."""
    out = []
    for labels, h in series:
        for q, v in h.quantiles_ms(now):
            out.append((name, {**labels, "quantile": q}, v))
        out.append((name + "_count", labels, h.count))
        out.append((name + "_sum", labels, h.sum_ms))
    return out


def expand(families) -> Iterator:
    """The families of a collection, where an item may be a callable that builds a list of them:
    the scrape reads numbers on the event loop and leaves making tens of thousands of samples
    (per partition) to the thread that renders the text."""
    for f in families:
        if callable(f):
            yield from f()
        else:
            yield f
