"""SCRAM does not tell whether a user exists (issue 18): an unknown user's server-first message
carries a decoy salt derived from a cluster-wide secret (the same on every probe, every broker,
after restarts) with the salt length and iteration count most real credentials have, and the
exchange then fails exactly as a wrong password does."""

from __future__ import annotations

import base64
import time

import pytest

from broker.protocol.apis import ApiKey
from broker.security import scram
from tests.security.conftest import REPO, run_cli
from tests.security.test_sasl_clients import RawConn

MECH = "SCRAM-SHA-256"


# --------------------------------------------------------------------------- sans-IO
def test_decoy_profile_is_the_most_common_shape():
    assert scram.decoy_profile([]) == scram.DecoyProfile(scram.DEFAULT_SALT_BYTES, scram.DEFAULT_ITERATIONS, False)
    creds = [(b"\x01" * 32, 8192), (b"\x02" * 32, 8192), (b"k3xq0" * 5 + b"a", 4096)]
    assert scram.decoy_profile(creds) == scram.DecoyProfile(32, 8192, False)
    java = [(b"1x2y3z4w5v6u7t8s9r0q1p2o3n", 4096)] * 3 + [(b"\x05" * 32, 8192)]  # ScramFormatter's base36 salts
    assert scram.decoy_profile(java) == scram.DecoyProfile(26, 4096, True)


def test_decoy_credential_is_stable_per_name_and_shaped_like_the_profile():
    seed = b"s" * 32
    profile = scram.DecoyProfile(26, 8192, True)
    a1 = scram.decoy_credential(MECH, "mallory", seed, profile)
    assert a1 == scram.decoy_credential(MECH, "mallory", seed, profile)  # every probe, every broker
    assert a1.salt != scram.decoy_credential(MECH, "trudy", seed, profile).salt
    assert a1.salt != scram.decoy_credential(MECH, "mallory", b"t" * 32, profile).salt  # a secret seed
    assert a1.salt != scram.decoy_credential("SCRAM-SHA-512", "mallory", seed, profile).salt
    assert len(a1.salt) == 26 and a1.salt.isalnum() and a1.salt == a1.salt.lower() and a1.iterations == 8192
    assert a1.decoy


def test_decoy_exchange_fails_like_a_wrong_password():
    real = scram.make_credential(MECH, "pw", b"r" * 32, 8192)
    decoy = scram.decoy_credential(MECH, "bob", b"seed", scram.DecoyProfile(32, 8192, False))
    for user, pw in (("alice", "nope"), ("bob", "pw")):
        server = scram.ScramServer(MECH, lambda u: real if u == "alice" else decoy, "snonce")
        client = scram.ScramClient(MECH, user, pw, "cnonce")
        first = server.first(client.first())
        with pytest.raises(scram.ScramError, match="invalid credentials"):
            server.final(client.final(first))


def test_decoy_costs_the_server_no_more_time_than_a_real_user():
    # the server never runs PBKDF2 (it stores the salted keys): both paths are a few HMACs
    real = scram.make_credential(MECH, "pw", b"r" * 32, 8192)
    profile = scram.DecoyProfile(32, 8192, False)

    def exchange(user: str) -> float:
        t0 = time.perf_counter()
        for _ in range(300):
            server = scram.ScramServer(MECH, lambda u: real if u == "alice" else scram.decoy_credential(
                MECH, u, b"seed", profile), "snonce")
            first = server.first(f"n,,n={user},r=cnonce".encode())
            nonce = first.split(b",")[0][2:].decode()
            with pytest.raises(scram.ScramError):
                server.final(f"c=biws,r={nonce},p={'A' * 43}=".encode())
        return time.perf_counter() - t0

    real_s, decoy_s = min(exchange("alice") for _ in range(3)), min(exchange("bob") for _ in range(3))
    assert decoy_s < real_s * 3 and real_s < decoy_s * 3, (real_s, decoy_s)


def test_decoy_seed_survives_the_metadata_log_and_snapshots():
    from metadata import records as r
    from metadata.delta import image_from_records

    rec = r.ScramDecoySeedRecord(b"\x00\xffseed")
    assert r.decode(r.encode(rec)) == rec
    image = image_from_records([rec])
    assert image.scram_decoy_seed == b"\x00\xffseed"
    assert image_from_records(list(image.to_records())).scram_decoy_seed == b"\x00\xffseed"


# --------------------------------------------------------------------------- on a node
def _server_first(port: int, user: str) -> dict[str, str]:
    conn = RawConn(port)
    try:
        assert conn.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": MECH}).error_code == 0
        res = conn.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": f"n,,n={user},r=abcdefgh".encode()})
        assert res.error_code == 0, res
        return dict(kv.split("=", 1) for kv in res.auth_bytes.decode().split(","))
    finally:
        conn.sock.close()


@pytest.fixture(scope="module")
def scram_node(tmp_path_factory):
    import sys

    sys.path.insert(0, str(REPO / "tests" / "integration"))
    from krafty_node import KraftyNode, free_port, start_or_fail

    node = KraftyNode(tmp_path_factory.mktemp("scram-decoy"))
    node.sasl_port = free_port()
    node.extra_properties = {
        "listeners": f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port},"
                     f"SASL_PLAINTEXT://127.0.0.1:{node.sasl_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": MECH,
    }
    start_or_fail(node)
    for user in ("alice", "bob"):
        res = run_cli("configs", "--bootstrap-server", node.bootstrap, "--alter", "--entity-type", "users",
                      "--entity-name", user, "--add-config", f"{MECH}=[iterations=8192,password={user}-pw]")
        assert res.returncode == 0, res.stderr
    yield node
    node.close()


def test_unknown_user_gets_the_same_salt_and_the_real_users_shape(scram_node):
    port = scram_node.sasl_port
    real = _server_first(port, "alice")
    probes = [_server_first(port, "mallory") for _ in range(3)]
    assert len({p["s"] for p in probes}) == 1, probes  # repeated probes: one salt, as for a real user
    assert _server_first(port, "alice")["s"] == real["s"]
    decoy = probes[0]
    assert decoy["i"] == real["i"] == "8192"
    assert len(base64.b64decode(decoy["s"])) == len(base64.b64decode(real["s"])) == 32
    assert _server_first(port, "trudy")["s"] != decoy["s"]
    # and after a restart (kill -9) the decoy is still the same: the seed lives in the metadata log
    scram_node.kill()
    scram_node.start()
    after = _server_first(port, "mallory")
    assert (after["s"], after["i"]) == (decoy["s"], decoy["i"])
