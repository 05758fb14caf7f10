"""The finalized ``transaction.version`` feature (KIP-890), as Kafka 4.x has it: a new cluster
starts at 2 (krafty storage format's default for release 4.0), UpdateFeatures moves it, ApiVersions
shows it to clients (Java clients use transaction version 2 only when it is finalized at 2), and the
coordinator follows it: ``__transaction_state`` values in version 0 below 1, the flexible version 1
from 1, and its own aborts (timeouts, fencing) with the epoch bump of transaction version 2 at 2.
confluent-kafka (librdkafka, transaction version 0 on the wire at every level) commits and aborts
at each level."""

from __future__ import annotations

import asyncio
import glob
import os
import shutil
import struct
import subprocess
import time
from pathlib import Path

import pytest

from common.errors import ErrorCode
from tests.protocol.test_features import finalized, update
from tests.protocol.test_txn_apis import Env

UPGRADE = 1


@pytest.fixture
async def env(tmp_path):
    e = await Env(tmp_path, real_leader=True).start()
    yield e
    await e.close()


def _confluent_commit_then_abort(port: int, tid: str) -> list[bytes]:
    from confluent_kafka import Consumer, Producer, TopicPartition

    p = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "transactional.id": tid, "linger.ms": 5})
    p.init_transactions(30)
    p.begin_transaction()
    for v in (b"c1", b"c2"):
        p.produce("t1", value=v, partition=0)
    p.commit_transaction(30)
    p.begin_transaction()
    p.produce("t1", value=b"a1", partition=0)
    p.flush(30)  # written (so the abort reaches the coordinator and the partition)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce("t1", value=b"c3", partition=1)
    p.commit_transaction(30)
    c = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": f"g-{tid}", "isolation.level": "read_committed",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 50})
    c.assign([TopicPartition("t1", 0, 0), TopicPartition("t1", 1, 0)])
    out, deadline = [], time.monotonic() + 20
    try:
        while len(out) < 3 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                out.append(m.value())
    finally:
        c.close()
    return sorted(out)


async def test_a_new_cluster_finalizes_transaction_version_2(env):
    supported, fin, _ = await finalized(env.conn)
    assert supported["transaction.version"] == (0, 2)
    assert fin["transaction.version"] == 2
    assert env.node.broker.apis.txn_coordinator.core.config.tv_level == 2


@pytest.mark.parametrize("level", [0, 1, 2])
async def test_confluent_kafka_commits_and_aborts_at_each_level(env, level):
    await env.set_tv_level(level)
    fin = (await finalized(env.conn))[1]
    assert fin.get("transaction.version") == (level or None)  # level 0 is not listed, as by Kafka
    tid = f"tv-{level}"
    got = await asyncio.get_running_loop().run_in_executor(None, _confluent_commit_then_abort, env.port, tid)
    assert got == [b"c1", b"c2", b"c3"]
    await env.state(tid, "CompleteCommit")
    values = [v for v in env.txn_log_raw_values(tid) if v is not None]
    # TransactionLogValue's version prefix: 0 at transaction.version 0, the flexible 1 from 1 on
    assert {struct.unpack(">h", v[:2])[0] for v in values} == {0 if level == 0 else 1}
    statuses = [v.status for v in env.txn_log_values(tid)]
    assert statuses[-1] == 4 and 5 in statuses, str(statuses)  # CompleteCommit last, a CompleteAbort before


async def test_update_features_moves_transaction_version_as_kafka_does(env):
    r = await update(env.conn, 1, [("transaction.version", 3, UPGRADE)])
    assert r.error_code == ErrorCode.INVALID_UPDATE_VERSION and "only supports versions 0-2" in r.error_message
    r = await update(env.conn, 1, [("transaction.version", 1, UPGRADE)])  # a downgrade needs its type
    assert r.error_code == ErrorCode.INVALID_UPDATE_VERSION and "downgrade" in r.error_message
    await env.set_tv_level(1)
    await env.set_tv_level(0)
    assert "transaction.version" not in (await finalized(env.conn))[1]
    await env.set_tv_level(2)
    assert (await finalized(env.conn))[1]["transaction.version"] == 2


async def test_the_coordinator_aborts_with_the_clusters_transaction_version(env):
    """A transaction past its timeout is aborted by the coordinator with the cluster's level (as
    Kafka's, "not from client, use server TV"): at 2 the abort bumps the epoch once more."""
    epochs = {}
    for level in (0, 2):
        await env.set_tv_level(level)
        tid = f"timeout-{level}"
        await env.find(tid)
        err, pid, epoch = await env.init(tid, timeout_ms=300)
        assert err == 0
        assert set((await env.add(tid, pid, epoch, {"t1": [0]})).values()) == {0}
        d = await env.state(tid, "CompleteAbort")
        epochs[level] = d.producer_epoch - epoch
    assert epochs[0] == 1  # the fencing bump
    assert epochs[2] == 2  # the fencing bump, then the bump of every transaction version 2 end


# Kafka's Java client jars (kafka-clients 4.x and its dependencies), as ../shared/suites' KAFKA_PATH has them
KAFKA_CLIENT_LIBS = os.environ.get("KAFKA_CLIENT_LIBS", "/tmp/suites/kafka-txn-data/libs")
_JARS = sorted(glob.glob(f"{KAFKA_CLIENT_LIBS}/*.jar"))


@pytest.mark.skipif(not (_JARS and shutil.which("javac") and shutil.which("java")),
                    reason=f"needs java, javac and Kafka's client jars in {KAFKA_CLIENT_LIBS} (KAFKA_CLIENT_LIBS)")
@pytest.mark.parametrize("level, epoch_bumps", [(2, 3), (1, 0)])
async def test_the_java_client_uses_transaction_version_2_only_when_it_is_finalized(env, tmp_path, level,
                                                                                     epoch_bumps):
    """At 2 the Java client ends each transaction with EndTxn v5, which bumps the epoch (3 in 3
    transactions); at 1 it keeps the epoch InitProducerId gave it, as against Kafka."""
    await env.set_tv_level(level)
    cp = os.pathsep.join(_JARS)
    src = Path(__file__).parent / "java" / "TxnLevels.java"
    loop = asyncio.get_running_loop()

    def run_java() -> subprocess.CompletedProcess:
        subprocess.run(["javac", "-cp", cp, "-d", str(tmp_path), str(src)], check=True, timeout=120)
        return subprocess.run(["java", "-cp", f"{tmp_path}{os.pathsep}{cp}", "TxnLevels", f"127.0.0.1:{env.port}",
                               f"java-{level}", "t1"], capture_output=True, text=True, timeout=120)
    done = await loop.run_in_executor(None, run_java)
    assert done.returncode == 0 and "OK" in done.stdout, done.stdout + done.stderr
    d = await env.state(f"java-{level}", "CompleteCommit")
    init_epoch = 0  # a new transactional id
    assert d.producer_epoch - init_epoch == epoch_bumps
    statuses = [v.status for v in env.txn_log_values(f"java-{level}")]
    assert statuses.count(4) == 2 and statuses.count(5) == 1, statuses


@pytest.mark.parametrize("level", [0, 2])
async def test_a_request_of_transaction_version_2_is_served_as_such_at_any_level(env, level):
    """As in Kafka (TransactionVersion.transactionVersionForEndTxn: the request's version decides,
    so a client that saw level 2 keeps working through a downgrade): EndTxn v5 bumps the epoch
    and answers the new one, EndTxn v4 does not, whatever the finalized level."""
    await env.set_tv_level(level)
    for ver, bump in ((5, 1), (4, 0)):
        tid = f"v{ver}-at-{level}"
        await env.find(tid)
        err, pid, epoch = await env.init(tid)
        assert err == 0
        assert set((await env.add(tid, pid, epoch, {"t1": [0]})).values()) == {0}
        code, new_pid, new_epoch = await env.end(tid, pid, epoch, True, ver=ver)
        assert code == 0
        assert (new_pid, new_epoch) == ((pid, epoch + 1) if bump else (-1, -1))
        assert (await env.state(tid, "CompleteCommit")).producer_epoch == epoch + bump
