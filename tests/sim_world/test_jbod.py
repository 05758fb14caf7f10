"""Whole-cluster worlds whose brokers have two log dirs each (JBOD, KIP-858): an EIO on one dir of
a broker takes only that dir's partitions offline there. The broker keeps running (it does not
stop, so the world does not restart it), the controller moves leadership off those replicas,
and with a controller killed meanwhile every invariant and the final history check still hold:
nothing acknowledged lost, no duplicate, no offset missing below the high watermark."""

from __future__ import annotations

import errno
import logging

import pytest

from sim import scenario
from sim.scenario import Fault, run_seed
from sim.world import Settings, World


@pytest.mark.parametrize("seed", range(4))
def test_a_failed_log_dir_takes_only_its_partitions_offline(seed, monkeypatch):
    broker = 4 + seed % 3
    seen = {}
    close = World.close

    def closing(w):  # what the broker and the metadata say at the end of the run
        node = w.procs[broker].node
        seen["offline"] = set(node.broker.replicas.offline_partitions)
        seen["marked"] = {(t.name, p) for t in node.loader.image.topics_by_name.values()
                          for p, reg in t.partitions.items() if broker in reg.offline}
        seen["led"] = {(t.name, p) for t in node.loader.image.topics_by_name.values()
                       for p, reg in t.partitions.items() if reg.leader == broker}
        close(w)
    monkeypatch.setattr(scenario.World, "close", closing)
    faults = [Fault(1.0, "disk", broker, arg=errno.EIO),
              Fault(2.0 + (seed % 5) * 0.5, "kill", 1 + seed % 3, duration=2.0)]
    r = run_seed(seed, safety_s=8.0, settings=Settings(log_dirs=2), faults=faults)
    assert r.disk_failures == 1
    assert not [t for t in r.trace if f"node {broker} stopped" in t], "the broker stopped: it has another dir"
    assert r.acked > 100
    assert seen["offline"] and seen["marked"] == seen["offline"]  # the controller marked exactly those
    assert not seen["led"] & seen["offline"]


@pytest.mark.parametrize("seed", range(100, 106))
def test_random_fault_schedules_with_two_log_dirs_per_broker(seed):
    # kills, power losses (each dir's meta.properties and checkpoints kept, as a node's own), partitions,
    # EIO/ENOSPC on one dir of a broker, ...: the world's invariants and history checks hold
    logging.disable(logging.CRITICAL)
    try:
        r = run_seed(seed, safety_s=3.0, settings=Settings(log_dirs=2))
    finally:
        logging.disable(logging.NOTSET)
    assert r.acked > 0
