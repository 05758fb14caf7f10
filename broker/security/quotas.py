"""Client byte-rate quotas (Kafka's ClientQuotaManager for produce and fetch), pure: the
caller passes ``now`` (seconds) and applies the throttle.

Quotas come from the metadata image (AlterClientQuotas). The quota of a request is the
first of Kafka's precedence list that sets the key:
  user+client-id, user+default client, user, default user+client-id,
  default user+default client, default user, client-id, default client-id.
Each user / client-id the matched entity names (defaults stand for the actual one) has its
own rate, measured like Kafka's sampled Rate (``quota.window.num`` samples of
``quota.window.size.seconds``); a client over its quota is throttled for
``(rate - quota) / quota * window`` ms, which brings its rate back to the quota."""

from __future__ import annotations

import dataclasses

PRODUCE = "producer_byte_rate"
FETCH = "consumer_byte_rate"

_SENSOR_EXPIRY_S = 3600.0  # Kafka expires idle quota sensors after an hour


@dataclasses.dataclass(slots=True)
class _Sensor:
    starts: list[float]  # start of each sample window, oldest first
    totals: list[float]
    last_used: float


class ClientQuotas:
    def __init__(self, window_num: int = 11, window_size_s: float = 1.0):
        self.window_num = window_num
        self.window_s = window_size_s
        self._quotas: dict = {}
        self._resolved: dict[tuple[str, str, str], tuple[float, tuple[str, str]] | None] = {}
        self._sensors: dict[tuple[str, str, str], _Sensor] = {}

    # --- configuration --------------------------------------------------------------------
    def update(self, client_quotas: dict) -> None:
        """Takes the image's ``client_quotas``; call when it changes (identity check is enough)."""
        if client_quotas is not self._quotas:
            self._quotas = client_quotas
            self._resolved = {}

    @property
    def enabled(self) -> bool:
        return bool(self._quotas)

    def quota(self, key: str, user: str, client_id: str) -> tuple[float, tuple[str, str]] | None:
        """(quota, (user tag, client-id tag)) of the first matching entity, or None."""
        rk = (key, user, client_id)
        if rk in self._resolved:
            return self._resolved[rk]
        q = self._quotas
        found = None
        for entity, tags in (
            ((("client-id", client_id), ("user", user)), (user, client_id)),
            ((("client-id", None), ("user", user)), (user, client_id)),
            ((("user", user),), (user, "")),
            ((("client-id", client_id), ("user", None)), (user, client_id)),
            ((("client-id", None), ("user", None)), (user, client_id)),
            ((("user", None),), (user, "")),
            ((("client-id", client_id),), ("", client_id)),
            ((("client-id", None),), ("", client_id)),
        ):
            values = q.get(entity)
            if values is not None and key in values:
                found = (values[key], tags)
                break
        if len(self._resolved) > 100_000:
            self._resolved.clear()
        self._resolved[rk] = found
        return found

    def max_bytes_in_window(self, key: str, user: str, client_id: str) -> int | None:
        """Kafka's getMaxValueInQuotaWindow: the most a single response may carry, so that a
        response alone never exceeds the quota over the whole window (and so a consumer with a
        low quota still makes progress); None without a quota."""
        found = self.quota(key, user, client_id)
        if found is None:
            return None
        return max(1, int(found[0] * (self.window_num - 1) * self.window_s))

    # --- measuring ------------------------------------------------------------------------
    def record(self, key: str, user: str, client_id: str, nbytes: int, now: float) -> int:
        """Records ``nbytes`` against the client's quota; returns the throttle time in ms (0 when
        within quota or without one)."""
        found = self.quota(key, user, client_id)
        if found is None:
            return 0
        limit, tags = found
        s = self._sensor((key, *tags), now)
        s.totals[-1] += nbytes
        rate = sum(s.totals) / self._window(s, now)
        if rate <= limit:
            return 0
        return int(round((rate - limit) / limit * self._window(s, now) * 1000))

    def unrecord(self, key: str, user: str, client_id: str, nbytes: int, now: float) -> None:
        """Takes back bytes recorded for a response that was not sent (a throttled fetch)."""
        found = self.quota(key, user, client_id)
        if found is not None:
            s = self._sensor((key, *found[1]), now)
            s.totals[-1] -= nbytes

    def _sensor(self, skey, now: float) -> _Sensor:
        s = self._sensors.get(skey)
        if s is None:
            if len(self._sensors) > 10_000:
                self._sensors = {k: v for k, v in self._sensors.items() if now - v.last_used < _SENSOR_EXPIRY_S}
            s = self._sensors[skey] = _Sensor([now], [0.0], now)
        s.last_used = now
        if now - s.starts[-1] >= self.window_s:
            s.starts.append(now)
            s.totals.append(0.0)
            # drop samples older than the whole window
            while len(s.starts) > self.window_num or (len(s.starts) > 1 and
                                                     now - s.starts[0] > self.window_num * self.window_s):
                s.starts.pop(0)
                s.totals.pop(0)
        return s

    def _window(self, s: _Sensor, now: float) -> float:
        """Kafka's Rate.windowSize: elapsed time over the samples, at least (num - 1) full windows."""
        elapsed = now - s.starts[0]
        full = int(elapsed / self.window_s)
        if full < self.window_num - 1:
            elapsed += (self.window_num - 1 - full) * self.window_s
        return max(elapsed, self.window_s)


def user_of(principal: str) -> str:
    """The quota user of a principal (``User:alice`` -> ``alice``)."""
    return principal.partition(":")[2] or principal
