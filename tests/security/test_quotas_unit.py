"""Client byte-rate quotas (broker/security/quotas.py), pure: Kafka's entity precedence, its
sampled rate and throttle time, and the per-response cap that keeps a throttled consumer
making progress."""

from __future__ import annotations

from broker.security.quotas import FETCH, PRODUCE, ClientQuotas, user_of


def quotas(entries: dict) -> ClientQuotas:
    q = ClientQuotas(window_num=11, window_size_s=1.0)
    q.update(entries)
    return q


def test_precedence_is_kafkas():
    ent = {
        (("client-id", "c"), ("user", "u")): {PRODUCE: 1.0},
        (("client-id", None), ("user", "u")): {PRODUCE: 2.0},
        (("user", "u"),): {PRODUCE: 3.0},
        (("client-id", "c"), ("user", None)): {PRODUCE: 4.0},
        (("client-id", None), ("user", None)): {PRODUCE: 5.0},
        (("user", None),): {PRODUCE: 6.0},
        (("client-id", "c"),): {PRODUCE: 7.0},
        (("client-id", None),): {PRODUCE: 8.0},
    }
    order = list(ent)
    for i, key in enumerate(order):
        q = quotas({k: ent[k] for k in order[i:]})
        assert q.quota(PRODUCE, "u", "c")[0] == ent[key][PRODUCE], key
    # an entity setting only the other key does not match
    assert quotas({(("user", "u"),): {FETCH: 9.0}}).quota(PRODUCE, "u", "c") is None
    assert quotas({}).quota(PRODUCE, "u", "c") is None


def test_throttle_time_brings_the_rate_back_to_the_quota():
    q = quotas({(("client-id", "c"),): {PRODUCE: 1000.0}})
    # the rate is measured over at least (samples - 1) windows = 10 s
    assert q.record(PRODUCE, "u", "c", 10_000, now=0.0) == 0  # 10 kB / 10 s = the quota
    ms = q.record(PRODUCE, "u", "c", 5_000, now=0.5)  # 15 kB over a 10.5 s window
    # Kafka: (rate - quota) / quota x window = (15000 / 10.5 - 1000) / 1000 x 10.5 s: the time
    # after which 15 kB over the window is the quota again
    assert ms == 4_500
    # other clients are not affected
    assert q.record(PRODUCE, "u", "other", 1_000_000, now=0.5) == 0


def test_default_entities_measure_each_client_separately():
    q = quotas({(("client-id", None),): {PRODUCE: 1000.0}})
    assert q.record(PRODUCE, "", "a", 10_000, now=0.0) == 0
    assert q.record(PRODUCE, "", "b", 10_000, now=0.0) == 0  # b has its own 1000 B/s
    assert q.record(PRODUCE, "", "a", 10_000, now=0.1) > 0


def test_samples_expire_so_the_client_gets_through_again():
    q = quotas({(("client-id", "c"),): {PRODUCE: 1000.0}})
    q.record(PRODUCE, "u", "c", 12_000, now=0.0)
    assert q.record(PRODUCE, "u", "c", 1, now=1.0) > 0
    assert q.record(PRODUCE, "u", "c", 1_000, now=12.5) == 0  # the first sample is gone


def test_fetch_cap_lets_a_throttled_consumer_progress():
    """Without a cap a response bigger than the quota over the window is answered empty
    (and unrecorded) every time: the consumer never progresses. Capped at
    max_bytes_in_window it does."""
    q = quotas({(("client-id", "c"),): {FETCH: 100.0}})
    cap = q.max_bytes_in_window(FETCH, "u", "c")
    assert cap == 1000  # 100 B/s x 10 s
    now = 0.0
    for _ in range(5):  # uncapped 1600-byte responses: throttled, taken back, again and again
        ms = q.record(FETCH, "u", "c", 1600, now)
        assert ms > 0
        q.unrecord(FETCH, "u", "c", 1600, now)
        now += ms / 1000
    assert q.record(FETCH, "u", "c", cap, now) == 0  # a capped response goes through
    assert q.max_bytes_in_window(FETCH, "u", "nobody") is None


def test_user_of_principal():
    assert user_of("User:alice") == "alice"
    assert user_of("User:CN=a,O=b") == "CN=a,O=b"
