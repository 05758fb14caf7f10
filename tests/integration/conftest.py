"""Fixtures for the real-client integration suite.

Target selection (environment):
  (default)              start krafty nodes: `python -m krafty node --config FILE`
  KRAFTY_IT_TARGET=mock  run against librdkafka's built-in mock cluster instead; tests that need
                         krafty-only features (restart, kill, admin APIs, broker configs) are
                         skipped with a reason. Only meant for checking the tests themselves.

`KraftyNode` (tests/integration/krafty_node.py) is the reusable process handle; import it from
there (`from krafty_node import KraftyNode` once this directory is on sys.path, which this
conftest ensures).
"""

from __future__ import annotations

import os
import re
import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from clients import CLIENTS, Confluent  # noqa: E402
from krafty_node import KraftyNode, MockCluster, NodeError, free_port, start_or_fail, wait_until  # noqa: E402,F401

TARGET = os.environ.get("KRAFTY_IT_TARGET", "krafty")
MOCK = TARGET == "mock"


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "krafty_only: needs a real krafty node (skipped on KRAFTY_IT_TARGET=mock)"
    )


def pytest_collection_modifyitems(config, items):
    if not MOCK:
        return
    skip = pytest.mark.skip(reason="KRAFTY_IT_TARGET=mock: librdkafka's mock cluster lacks this feature")
    # kafka-python 3 cannot decode the mock cluster's ApiVersions error reply (it never bootstraps).
    skip_kp = pytest.mark.skip(
        reason="KRAFTY_IT_TARGET=mock: kafka-python cannot bootstrap from the mock cluster"
    )
    for item in items:
        if "krafty_only" in item.keywords:
            item.add_marker(skip)
        params = getattr(getattr(item, "callspec", None), "params", {})
        if params.get("client_name") == "kafka-python":
            item.add_marker(skip_kp)


def _start_node(tmp: Path, **kw) -> KraftyNode:
    return start_or_fail(KraftyNode(tmp, **kw))


GROUP_PROPS = {  # a short initial rebalance delay (Kafka's 3 s only slows tests), a small offsets topic
    "group.initial.rebalance.delay.ms": "200",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "5",
}


def start_group_node(tmp_path_factory, name: str) -> KraftyNode:
    """One krafty node for group tests (groups are tested against krafty only)."""
    if MOCK:
        pytest.skip("KRAFTY_IT_TARGET=mock: groups are tested against krafty")
    return _start_node(tmp_path_factory.mktemp(name), extra_properties=GROUP_PROPS)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A single krafty node (broker+controller) with default settings, shared by a test module."""
    if MOCK:
        m = MockCluster().start()
        yield m
        m.close()
        return
    node = _start_node(tmp_path_factory.mktemp("krafty"))
    yield node
    node.close()


@pytest.fixture
def node_factory(tmp_path):
    """Start extra nodes private to one test; all of them are killed at teardown."""
    nodes: list[KraftyNode] = []

    def make(**kw) -> KraftyNode:
        if MOCK:
            pytest.skip("KRAFTY_IT_TARGET=mock: needs a real krafty node")
        node = _start_node(tmp_path / f"node{len(nodes)}", **kw)
        nodes.append(node)
        return node

    yield make
    for n in nodes:
        n.close()


@pytest.fixture
def topic(request):
    """A topic name unique to this test (not created)."""
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name)[:150].strip("-.")
    return f"it-{base}-{uuid.uuid4().hex[:6]}"


def create_topic(target, name: str, partitions: int = 1, configs: dict | None = None) -> None:
    """Create a topic through CreateTopics (confluent AdminClient) and wait until it has leaders.

    On the mock cluster (no CreateTopics) the topic is auto-created by a Metadata request.
    """
    if MOCK:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": target.bootstrap})
        wait_until(
            lambda: _has_leaders(p.list_topics(name, timeout=10), name, 1), 30, message=f"mock topic {name}"
        )
        return
    Confluent().create_topic(target.bootstrap, name, partitions, configs)
    wait_topic(target.bootstrap, name, partitions)


def _has_leaders(md, name, partitions):
    t = md.topics.get(name)
    return (
        t is not None
        and t.error is None
        and len(t.partitions) >= partitions
        and all(p.leader >= 0 for p in t.partitions.values())
    )


def wait_topic(bootstrap: str, name: str, partitions: int = 1, timeout: float = 60) -> None:
    from confluent_kafka.admin import AdminClient

    a = AdminClient({"bootstrap.servers": bootstrap})
    wait_until(
        lambda: _has_leaders(a.list_topics(name, timeout=10), name, partitions),
        timeout,
        message=f"topic {name} with {partitions} partitions and leaders",
    )


@pytest.fixture
def make_topic(broker):
    def make(name, partitions=1, configs=None):
        create_topic(broker, name, partitions, configs)
        return name

    return make


@pytest.fixture(params=list(CLIENTS))
def any_client(request):
    return CLIENTS[request.param]


def pytest_report_header(config):
    return f"krafty integration target: {TARGET}"


@pytest.fixture(autouse=True)
def _hang_report():
    """Dump every thread's stack if one test runs for more than 4 minutes (no test should)."""
    import faulthandler

    faulthandler.dump_traceback_later(240, exit=False)
    yield
    faulthandler.cancel_dump_traceback_later()
