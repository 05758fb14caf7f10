"""A krafty node with every security protocol on its own listener, a test CA made with
openssl, and SCRAM users created through ``krafty configs`` (AlterUserScramCredentials)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))

from krafty_node import KraftyNode, free_port, start_or_fail  # noqa: E402

from tests.security.certs import make_ca  # noqa: E402

ADMIN_PW = "admin-secret"
USERS = {"alice": "alice-secret", "bob": "b0b=s3cret!"}
KEY_PASSWORD = "key-pw"


def jaas_plain(users: dict[str, str], login: tuple[str, str] | None = None) -> str:
    opts = "".join(f' user_{u}="{p}"' for u, p in users.items())
    own = f' username="{login[0]}" password="{login[1]}"' if login else ""
    return f"org.apache.kafka.common.security.plain.PlainLoginModule required{own}{opts};"


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "krafty", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def produce_timed(conf: dict, topic: str, total_bytes: int, record: int = 10_000) -> tuple[float, int]:
    """Produce ``total_bytes`` in ``record``-byte values with confluent-kafka (``conf`` adds to
    linger 5 ms, 64 KiB batches); returns (seconds until flushed, largest broker throttle in
    ms from librdkafka's statistics)."""
    import json
    import time

    from confluent_kafka import Producer

    stats = []
    p = Producer({"linger.ms": 5, "batch.size": 64 * 1024, "statistics.interval.ms": 200, "stats_cb": stats.append,
                  **conf})
    value = b"x" * record
    t0 = time.monotonic()
    for _ in range(total_bytes // record):
        while True:
            try:
                p.produce(topic, value)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(60) == 0
    elapsed = time.monotonic() - t0
    p.poll(0.5)
    throttle = max((b["throttle"]["max"] for s in stats for b in json.loads(s)["brokers"].values()
                    if b.get("throttle")), default=0)
    return elapsed, throttle


@pytest.fixture(scope="session")
def ca(tmp_path_factory):
    ca = make_ca(tmp_path_factory.mktemp("ca"))
    ca.server_keystore = ca.keystore_pem("server", "localhost", server=True, key_password=KEY_PASSWORD)
    ca.client_cert, ca.client_key = ca.issue("client", "alice-cert")
    other = make_ca(tmp_path_factory.mktemp("other-ca"))
    ca.rogue_cert, ca.rogue_key = other.issue("rogue", "mallory")
    return ca


class SecureNode:
    def __init__(self, node: KraftyNode, ports: dict[str, int], ca):
        self.node, self.ports, self.ca = node, ports, ca

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"


@pytest.fixture(scope="module")
def secure_node(tmp_path_factory, ca):
    tmp = tmp_path_factory.mktemp("secure-node")
    ports = {n: free_port() for n in ("SSL", "SASL_PLAINTEXT", "SASL_SSL", "REAUTH")}
    node = KraftyNode(tmp)
    ports["PLAINTEXT"] = node.port
    plain_users = {"admin": ADMIN_PW, **USERS}
    node.extra_properties = {
        "listeners": f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port},"
                     + ",".join(f"{n}://127.0.0.1:{ports[n]}" for n in ("SSL", "SASL_PLAINTEXT", "SASL_SSL", "REAUTH")),
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SSL:SSL,"
                                          "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,REAUTH:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(ca.server_keystore),
        "ssl.key.password": KEY_PASSWORD,
        "ssl.truststore.location": str(ca.ca_cert),
        "listener.name.ssl.ssl.client.auth": "required",
        "sasl.jaas.config": jaas_plain(plain_users),
        "listener.name.reauth.connections.max.reauth.ms": "1500",
        "auto.create.topics.enable": "true",
    }
    start_or_fail(node)
    for user, pw in USERS.items():
        for mech, iters in (("SCRAM-SHA-256", 8192), ("SCRAM-SHA-512", 4096)):
            res = run_cli("configs", "--bootstrap-server", node.bootstrap, "--alter", "--entity-type", "users",
                          "--entity-name", user, "--add-config", f"{mech}=[iterations={iters},password={pw}]")
            assert res.returncode == 0, res.stderr
    yield SecureNode(node, ports, ca)
    node.close()
