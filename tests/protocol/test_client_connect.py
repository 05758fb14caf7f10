"""The inter-broker client turns every way a connection can fail into ConnectionError, which
the replica fetcher handles with a backoff (anything else is logged with a traceback every
round: a stopped compose container's name that no longer resolves did that). A connection the
other broker closed while it was idle is opened again for the next request."""

import asyncio
import socket
import time

import pytest

from broker.protocol.apis import ApiKey
from broker.protocol.client import KafkaConnection
from tests.protocol.conftest import start_node


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.mark.parametrize("host", ["no-such-broker.invalid", "127.0.0.1"])
async def test_connect_failures_are_connection_errors(host):
    conn = KafkaConnection(host, _closed_port(), client_id="t")
    with pytest.raises(ConnectionError, match=f"connection to {host}:"):
        await conn.request(ApiKey.API_VERSIONS, 0, {}, timeout=5)
    assert not conn.connected


@pytest.mark.parametrize("encoded", [False, True], ids=["request", "request_body"])
async def test_a_connection_the_broker_closed_while_idle_is_opened_again(tmp_path, encoded):
    """The other broker's connections.max.idle.ms closed the connection between two requests
    (a partition leader asks a transaction coordinator once per transaction): the next request
    goes on a new connection, as Kafka's NetworkClient does, instead of failing on the dead one
    (which made a transaction's first produce fail verification with NETWORK_EXCEPTION, given to
    the producer as NOT_ENOUGH_REPLICAS; librdkafka then aborted the transaction: its test 0137)."""
    node = await start_node(tmp_path, connections_max_idle_ms="500")
    conn = KafkaConnection("127.0.0.1", node.port, client_id="t")
    try:
        assert int((await conn.request(ApiKey.API_VERSIONS, 0, {}, timeout=5)).error_code) == 0
        deadline = time.monotonic() + 10
        while sum(len(s._conns) for s in node.broker.servers) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # the broker's idle sweep closes it
        assert sum(len(s._conns) for s in node.broker.servers) == 0
        await asyncio.sleep(0.1)  # the end of stream reaches the client's reader
        old = conn._w
        if encoded:  # (the replica fetchers' way: a body written by broker/apis/wire.py)
            body = await conn.request_body(ApiKey.API_VERSIONS, 0, b"", timeout=5)
            assert int.from_bytes(body[:2], "big", signed=True) == 0  # error_code
        else:
            resp = await conn.request(ApiKey.API_VERSIONS, 0, {}, timeout=5)
            assert int(resp.error_code) == 0
        assert conn.connected and old.is_closing()
    finally:
        conn.close()
        await node.stop()
