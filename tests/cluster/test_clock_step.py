"""Wall-clock steps on a running 3+3 cluster (issue 22): the controllers run under libfaketime
with a timestamp file, so that writing the file steps their wall clock (and only that: the
monotonic clock runs on, as with an NTP or operator step). Broker sessions are timed with the
monotonic clock: a step forward longer than broker.session.timeout.ms fences no broker, and
after a step back a killed broker is still fenced on time."""

from __future__ import annotations

import os
import time

import pytest
from confluent_kafka.admin import AdminClient

from tests.cluster.conftest import FAST, Cluster, wait_until

LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"

pytestmark = [pytest.mark.cluster, pytest.mark.skipif(not os.path.exists(LIBFAKETIME), reason="libfaketime missing")]


def _brokers(c) -> set[int]:
    return set(AdminClient({"bootstrap.servers": c.bootstrap}).list_topics(timeout=5).brokers)


def test_wall_clock_steps_on_the_controllers_fence_nobody_and_a_dead_broker_on_time(tmp_path):
    stamp = tmp_path / "faketime"
    stamp.write_text("+0s\n")
    c = Cluster(str(tmp_path / "cluster"), overrides=FAST)
    os.makedirs(c.dir, exist_ok=True)
    for i in range(1, c.n_controllers + 1):
        c.env[f"controller-{i}"] = {"LD_PRELOAD": LIBFAKETIME, "FAKETIME_TIMESTAMP_FILE": str(stamp),
                                    "FAKETIME_DONT_FAKE_MONOTONIC": "1", "FAKETIME_CACHE_DURATION": "1"}
    c.start()
    try:
        all_brokers = set(range(c.n_controllers + 1, c.n_controllers + c.n_brokers + 1))
        wait_until(lambda: _brokers(c) == all_brokers, 90, "all brokers registered and unfenced")
        # forward 60 s (20 session timeouts): nobody may be fenced
        stamp.write_text("+60s\n")
        end = time.time() + 3 * 3.0
        while time.time() < end:
            assert _brokers(c) == all_brokers, "a wall-clock step forward fenced a broker"
            time.sleep(0.3)
        # back 120 s: a broker that dies now is still fenced within its session timeout
        stamp.write_text("-60s\n")
        time.sleep(1.5)
        victim = max(all_brokers)
        t_kill = time.time()
        c.kill(f"broker-{victim}")
        wait_until(lambda: victim not in _brokers(c), 30, "the killed broker fenced")
        elapsed = time.time() - t_kill
        assert elapsed < 3.0 + 6.0, f"fenced after {elapsed:.1f}s with a 3 s session timeout"
        assert _brokers(c) == all_brokers - {victim}
    finally:
        c.shutdown()
