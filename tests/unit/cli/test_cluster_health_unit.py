"""krafty cluster health's verdict (rpk cluster health's overview) from Metadata and the quorum."""

from __future__ import annotations

from types import SimpleNamespace as NS

from krafty.cluster_health import assess


def _md(alive, partitions):
    return NS(brokers=[NS(node_id=b) for b in alive], controller_id=alive[0] if alive else -1, topics=[
        NS(name="t", error_code=0, partitions=[NS(partition_index=i, leader_id=leader, replica_nodes=replicas,
                                                  isr_nodes=isr) for i, (leader, replicas, isr) in enumerate(partitions)])])


def test_a_healthy_cluster():
    h = assess(_md([1, 2, 3], [(1, [1, 2, 3], [1, 2, 3]), (2, [2, 3, 1], [2, 3, 1])]), quorum_leader=100)
    assert h.healthy and h.reasons == [] and h.brokers == [1, 2, 3] and h.down == []
    assert h.render().splitlines() == [
        "CLUSTER HEALTH OVERVIEW", "=======================",
        "Healthy:                          true", "Unhealthy reasons:                []",
        "Controller ID:                    100", "All nodes:                        [1 2 3]",
        "Nodes down:                       []", "Leaderless partitions (0):        []",
        "Under-replicated partitions (0):  []"]


def test_a_broker_down_leaves_partitions_under_replicated_or_leaderless():
    h = assess(_md([1, 2], [(1, [1, 3], [1]), (-1, [3], [3]), (3, [3, 2], [3, 2]), (2, [2, 1], [2, 1])]),
               quorum_leader=-1)
    assert not h.healthy
    assert h.reasons == ["no_elected_controller", "nodes_down", "leaderless_partitions", "under_replicated_partitions"]
    assert h.down == [3] and h.brokers == [1, 2, 3]
    assert h.leaderless == ["t/1", "t/2"] and h.under_replicated == ["t/0"]
    assert "Leaderless partitions (2):        [t/1 t/2]" in h.render()
