"""Finalized features: ApiVersions' supported and finalized features (metadata.version from the
bootstrap checkpoint), UpdateFeatures v0-v2 through the broker, kafka-python's AdminClient and
`krafty features`, with Kafka's error codes."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from broker.protocol.apis import ApiKey
from broker.protocol.client import KafkaConnection
from common.errors import ErrorCode


async def _conn(node):
    c = KafkaConnection("127.0.0.1", node.port)
    await c.connect()
    return c


async def update(c, ver, updates, validate_only=False):
    keys = []
    for name, level, kind in updates:
        k = {"feature": name, "max_version_level": level}
        if ver == 0:
            k["allow_downgrade"] = kind != 1
        else:
            k["upgrade_type"] = kind
        keys.append(k)
    body = {"timeout": 60_000, "feature_updates": keys}
    if ver >= 1:
        body["validate_only"] = validate_only
    return await c.request(ApiKey.UPDATE_FEATURES, ver, body)


async def finalized(c) -> tuple[dict, dict, int]:
    r = await c.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    return ({f.name: (f.min_version, f.max_version) for f in r.supported_features},
            {f.name: f.max_version_level for f in r.finalized_features}, r.finalized_features_epoch)


async def test_api_versions_and_update_features(node):
    c = await _conn(node)
    try:
        supported, fin, epoch = await finalized(c)
        assert supported["metadata.version"] == (7, 25) and supported["transaction.version"] == (0, 2)
        assert supported["share.version"] == (0, 1)
        assert fin == {"metadata.version": 25, "transaction.version": 2, "share.version": 1} and epoch >= 0
        # a safe downgrade with no metadata change between (22 -> 21 is none; 25 -> 22 crosses 23)
        r = await update(c, 1, [("metadata.version", 22, 2)])
        assert r.error_code == ErrorCode.INVALID_UPDATE_VERSION and "might delete metadata" in r.error_message
        assert list(r.results) == []
        r = await update(c, 1, [("metadata.version", 25, 1)], validate_only=True)
        assert r.error_code == 0 and [x.feature for x in r.results] == ["metadata.version"]
        r = await update(c, 2, [("group.version", 1, 1)])
        assert r.error_code == ErrorCode.INVALID_UPDATE_VERSION and "does not support this feature" in r.error_message
        r = await update(c, 0, [("metadata.version", 21, 1)])  # v0: a lower level without allow_downgrade
        assert r.error_code == ErrorCode.INVALID_UPDATE_VERSION and "downgrade" in r.error_message
        r = await update(c, 1, [("metadata.version", 25, 1), ("metadata.version", 24, 2)])
        assert r.error_code == ErrorCode.INVALID_REQUEST
        assert (await finalized(c))[1] == {"metadata.version": 25, "transaction.version": 2, "share.version": 1}
    finally:
        c.close()


async def test_a_cluster_formatted_at_an_older_metadata_version_upgrades(tmp_path):
    import io

    from krafty import storage
    from krafty.node import Node
    from metadata import records as r
    from tests.protocol.conftest import TEST_CLUSTER_ID, node_config

    cfg, port = node_config(tmp_path)
    storage.format_directories(cfg, TEST_CLUSTER_ID, bootstrap=[r.FeatureLevelRecord("metadata.version", 21)],
                               out=io.StringIO())
    n = Node(cfg)
    await n.start()
    n.port = port
    try:
        c = await _conn(n)
        assert (await finalized(c))[1] == {"metadata.version": 21}
        from kafka.admin import KafkaAdminClient

        def kafka_python():
            a = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{n.port}")
            try:
                got = a.describe_features()
                res = a.update_features({"metadata.version": 25})
                return got, res
            finally:
                a.close()
        got, res = await asyncio.get_running_loop().run_in_executor(None, kafka_python)
        assert got["metadata.version"]["finalized"] == (21, 21) and got["metadata.version"]["supported"] == (7, 25)
        assert res == {"metadata.version": "OK"}, res
        assert (await finalized(c))[1] == {"metadata.version": 25}
        c.close()
        p = await asyncio.create_subprocess_exec(sys.executable, "-m", "krafty", "features", "--bootstrap-server",
                                                 f"127.0.0.1:{n.port}", "describe", stdout=subprocess.PIPE)
        out, _ = await p.communicate()
        assert "Feature: metadata.version\tSupportedMinVersion: 3.3-IV3\tSupportedMaxVersion: 4.0-IV3\t" \
               "FinalizedVersionLevel: 4.0-IV3\tEpoch: " in out.decode(), out
        p = await asyncio.create_subprocess_exec(sys.executable, "-m", "krafty", "features", "--bootstrap-server",
                                                 f"127.0.0.1:{n.port}", "downgrade", "--metadata", "3.3",
                                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = await p.communicate()
        assert p.returncode == 1 and out.decode().startswith("Could not downgrade metadata.version to 3.3-IV3. "
                                                             "INVALID_UPDATE_VERSION"), out
    finally:
        await n.stop()
