"""Broker-to-broker requests of transactions that this broker sends to itself, answered in process.

The transaction coordinator sends WriteTxnMarkers to each partition's leader and partition
leaders send AddPartitionsToTxn v4+ (KIP-890 verification) to the coordinator; when both ends are
this broker, ``LoopbackConnection`` stands in for the ``KafkaConnection`` to its own inter-broker
listener: the same handler runs on the typed request and the caller gets the typed response, as
over the wire, without the socket round trip, the framing and the one-request-at-a-time of a
connection (on one broker every transaction paid them once per partition for the check and once
for the markers, on the path of the producer's next request). A broker trusts itself: no ACL
check, as for the ClusterAction its own principal has.
"""

from __future__ import annotations

import asyncio
import logging

from broker.protocol import codec
from broker.protocol.apis import ApiKey
from broker.server import RequestContext

log = logging.getLogger("krafty.apis.loopback")


class LoopbackConnection:
    def __init__(self, apis, broker_id: int):
        self.apis = apis  # KafkaApis: its txn_apis and txn_data_apis
        self.broker_id = broker_id
        self.listener = apis.config["inter.broker.listener.name"]
        self.sent = 0  # requests answered (for tests)

    async def request(self, api_key: int, version: int, data: dict, timeout: float = 30.0):
        """As ``KafkaConnection.request``: the typed response; ConnectionError after ``timeout``."""
        if api_key != ApiKey.WRITE_TXN_MARKERS and not (api_key == ApiKey.ADD_PARTITIONS_TO_TXN and version >= 4):
            raise ValueError(f"no loopback for api key {api_key} v{version}")
        req = codec.build_request(api_key, version, data)
        header = codec.RequestHeader(api_key, version, 0, f"broker-{self.broker_id}-loopback", 0)
        ctx = RequestContext(header, self.listener, "loopback", -1)
        if api_key == ApiKey.WRITE_TXN_MARKERS:
            call = self.apis.txn_data_apis.write_markers(ctx, req)
        else:
            call = self.apis.txn_apis.add_partitions_for_brokers(ctx, req, version)
        self.sent += 1
        try:
            resp = await asyncio.wait_for(call, timeout)
        except TimeoutError:
            raise ConnectionError(f"loopback {ApiKey(api_key).name} timed out after {timeout}s") from None
        except (asyncio.CancelledError, ConnectionError):
            raise
        except Exception as e:  # a failure of the handler: the caller retries, as after a lost connection
            log.exception("loopback %s failed", ApiKey(api_key).name)
            raise ConnectionError(f"loopback {ApiKey(api_key).name} failed: {e!r}") from None
        return codec.build_response(api_key, version, resp)

    def close(self) -> None:
        pass


__all__ = ["LoopbackConnection"]
