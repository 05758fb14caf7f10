"""The clickstream example end to end: every click is counted in exactly one closed window."""

from __future__ import annotations


def test_clickstream_example_counts_every_click(spark, kafka, bootstrap):
    from pipeline.examples import demo

    stats = demo.run(bootstrap, spark=spark, rate=300, seconds=8, users=20, speedup=30, quiet=True)
    assert stats["produced"] > 2000
    assert stats["counted"] == stats["produced"], stats
    # with event time x20, 8 s cover 4 minutes: several closed windows per active user
    assert stats["windows"] >= 20
    assert stats["latency_ms_p50"] == stats["latency_ms_p50"]  # measured (not NaN)
