"""The inter-broker client turns every way a connection can fail into ConnectionError, which
the replica fetcher handles with a backoff (anything else is logged with a traceback every
round: a stopped compose container's name that no longer resolves did that)."""

import socket

import pytest

from broker.protocol.apis import ApiKey
from broker.protocol.client import KafkaConnection


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
