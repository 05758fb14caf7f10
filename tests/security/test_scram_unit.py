"""SCRAM (RFC 5802/7677), PLAIN, the SASL session state machine, JAAS parsing, TLS subject
names and the controller's SCRAM credential rules, without sockets; the SASL exchanges
are fuzzed with hypothesis."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.protocol import codec
from broker.protocol.apis import ApiKey
from broker.security import scram
from broker.security.sasl import AUTH_FAILED_MESSAGE, ListenerSecurity, SaslClose, SaslSession, parse_jaas
from broker.security.ssl import subject_dn
from common.config import ConfigError
from common.errors import ErrorCode
from controller.scram import alter_user_scram_credentials
from metadata import records as r
from metadata.controller_api import ScramChange
from metadata.delta import image_from_records


def test_rfc7677_sha256_example():
    # RFC 7677 section 3: user "user", password "pencil"
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    cred = scram.make_credential("SCRAM-SHA-256", "pencil", salt, 4096)
    server = scram.ScramServer("SCRAM-SHA-256", lambda u: cred if u == "user" else None,
                               "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    first = server.first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = server.final(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                         b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.username == "user"


@pytest.mark.parametrize("mech", list(scram.MECHANISMS))
@pytest.mark.parametrize("user", ["alice", "we,ird=name"])
def test_client_and_server_agree(mech, user):
    cred = scram.make_credential(mech, "pw", b"0123456789abcdef", 4096)
    server = scram.ScramServer(mech, lambda u: cred if u == user else None, "snonce")
    client = scram.ScramClient(mech, user, "pw", "cnonce")
    client.verify(server.final(client.final(server.first(client.first()))))
    assert server.username == user


@pytest.mark.parametrize("mech", list(scram.MECHANISMS))
def test_wrong_password_and_unknown_user_fail_the_same_way(mech):
    cred = scram.make_credential(mech, "pw", b"0123456789abcdef", 4096)
    for user, pw in (("alice", "nope"), ("bob", "pw")):
        server = scram.ScramServer(mech, lambda u: cred if u == "alice" else None, "snonce", b"k")
        client = scram.ScramClient(mech, user, pw, "cnonce")
        first = server.first(client.first())
        assert b",s=" in first  # an unknown user gets a decoy salt, not an early error
        with pytest.raises(scram.ScramError):
            server.final(client.final(first))


def test_replayed_final_with_another_server_nonce_fails():
    cred = scram.make_credential("SCRAM-SHA-256", "pw", b"0123456789abcdef", 4096)
    s1 = scram.ScramServer("SCRAM-SHA-256", lambda u: cred, "nonce-one")
    client = scram.ScramClient("SCRAM-SHA-256", "alice", "pw", "cnonce")
    final = client.final(s1.first(client.first()))
    s2 = scram.ScramServer("SCRAM-SHA-256", lambda u: cred, "nonce-two")
    s2.first(client.first())
    with pytest.raises(scram.ScramError):
        s2.final(final)


@settings(max_examples=400, deadline=None)
@given(first=st.binary(max_size=300), final=st.binary(max_size=300))
def test_fuzzed_scram_messages_fail_cleanly(first, final):
    cred = scram.make_credential("SCRAM-SHA-512", "pw", b"0123456789abcdef", 4096)
    server = scram.ScramServer("SCRAM-SHA-512", lambda u: cred, "snonce", b"k")
    try:
        server.first(first)
    except scram.ScramError:
        return
    with pytest.raises(scram.ScramError):
        server.final(final)


_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)


@settings(max_examples=300, deadline=None)
@given(user=_text, nonce=_text, ext=_text, proof=_text, cbind=_text)
def test_fuzzed_well_shaped_scram_messages_fail_cleanly(user, nonce, ext, proof, cbind):
    cred = scram.make_credential("SCRAM-SHA-256", "pw", b"0123456789abcdef", 4096)
    server = scram.ScramServer("SCRAM-SHA-256", lambda u: cred, "snonce", b"k")
    try:
        first = server.first(f"n,,n={user},r={nonce}{ext}".encode())
    except scram.ScramError:
        return
    srv_nonce = first.split(b",")[0][2:].decode()
    with pytest.raises(scram.ScramError):
        server.final(f"c={cbind},r={srv_nonce},p={proof}".encode())


def _sec(**kw) -> ListenerSecurity:
    return ListenerSecurity("SASL_PLAINTEXT", "SASL_PLAINTEXT", None, ("PLAIN", "SCRAM-SHA-256"),
                            {"alice": "alice-pw"}, **kw)


def _req(session: SaslSession, api_key: int, version: int, data: dict):
    body = codec.encode(codec.build(codec.request_type(api_key, version), data))
    hdr = codec.RequestHeader(api_key, version, 7, "t", 0)
    return session.intercept(hdr, memoryview(body))


def _resp(chunks, api_key, version):
    return codec._reader(codec.response_type(api_key, version))(chunks[1], 0)[0]


@settings(max_examples=300, deadline=None)
@given(token=st.binary(max_size=200), mech=st.sampled_from(["PLAIN", "SCRAM-SHA-256"]),
       follow=st.binary(max_size=200))
def test_fuzzed_sasl_authenticate_tokens_never_authenticate(token, mech, follow):
    s = SaslSession(_sec(), lambda u, m: None)
    _req(s, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mech})
    chunks, close = _req(s, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token})
    res = _resp(chunks, ApiKey.SASL_AUTHENTICATE, 2)
    if close:
        assert res.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and res.error_message == AUTH_FAILED_MESSAGE
        assert not s.authenticated
        return
    assert mech == "SCRAM-SHA-256" and not s.authenticated  # got a server-first (decoy): try a final
    chunks, close = _req(s, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": follow})
    assert close and _resp(chunks, ApiKey.SASL_AUTHENTICATE, 2).error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert not s.authenticated


def test_session_gate_and_plain():
    s = SaslSession(_sec(), lambda u, m: None)
    assert _req(s, ApiKey.API_VERSIONS, 0, {}) == (None, False)
    with pytest.raises(SaslClose):
        _req(s, ApiKey.METADATA, 12, {"topics": None})
    s = SaslSession(_sec(), lambda u, m: None)
    _req(s, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    chunks, close = _req(s, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\0alice\0alice-pw"})
    assert not close and s.principal == "User:alice"
    assert _req(s, ApiKey.METADATA, 12, {"topics": None}) == (None, False)


def test_session_expiry_closes_on_the_next_request():
    now = [0.0]
    s = SaslSession(_sec(reauth_ms=1000), lambda u, m: None, clock=lambda: now[0])
    _req(s, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    chunks, _ = _req(s, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\0alice\0alice-pw"})
    assert _resp(chunks, ApiKey.SASL_AUTHENTICATE, 2).session_lifetime.total_seconds() == 1.0
    now[0] = 0.9
    assert _req(s, ApiKey.METADATA, 12, {"topics": None}) == (None, False)
    now[0] = 1.1
    with pytest.raises(SaslClose):
        _req(s, ApiKey.METADATA, 12, {"topics": None})


def test_jaas_parsing():
    mod, opts = parse_jaas('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
                           'password="a\\"b" user_admin="x" user_bob=plainword;', "k")
    assert mod.endswith("PlainLoginModule")
    assert opts == {"username": "admin", "password": 'a"b', "user_admin": "x", "user_bob": "plainword"}
    with pytest.raises(ConfigError, match="'k'"):
        parse_jaas("username=admin", "k")


def test_subject_dn_is_rfc2253():
    cert = {"subject": ((("countryName", "US"),), (("organizationName", "Acme, Inc."),), (("commonName", "alice"),))}
    assert subject_dn(cert) == "CN=alice,O=Acme\\, Inc.,C=US"
    assert subject_dn({}) is None


def test_controller_scram_rules():
    cred = scram.make_credential("SCRAM-SHA-256", "pw", b"salt", 4096)
    ok = ScramChange("alice", "SCRAM-SHA-256", False, cred.salt, cred.stored_key, cred.server_key, 4096)
    image = image_from_records([])
    recs, res = alter_user_scram_credentials(image, [ok])
    assert res == [("alice", ErrorCode.NONE, None)] and isinstance(recs[0], r.UserScramCredentialRecord)
    image = image_from_records(recs)
    assert image.scram_credentials[("alice", "SCRAM-SHA-256")].stored_key == cred.stored_key
    assert r.decode(r.encode(recs[0])) == recs[0]
    cases = [
        ([ok, ok], ErrorCode.DUPLICATE_RESOURCE),
        ([ScramChange("", "SCRAM-SHA-256", False, b"s", b"k", b"k", 4096)], ErrorCode.UNACCEPTABLE_CREDENTIAL),
        ([ScramChange("bob", "SCRAM-SHA-256", False, b"s", b"k", b"k", 100)], ErrorCode.UNACCEPTABLE_CREDENTIAL),
        ([ScramChange("bob", "SCRAM-SHA-1", False, b"s", b"k", b"k", 4096)], ErrorCode.UNSUPPORTED_SASL_MECHANISM),
        ([ScramChange("bob", "SCRAM-SHA-256", True)], ErrorCode.RESOURCE_NOT_FOUND),
    ]
    for changes, code in cases:
        recs2, res2 = alter_user_scram_credentials(image, changes)
        assert recs2 == [] and res2[0][1] == code, (changes, res2)
    recs3, _ = alter_user_scram_credentials(image, [ScramChange("alice", "SCRAM-SHA-256", True)])
    assert image_from_records(recs3, base=image).scram_credentials == {}


def test_configs_cli_add_config_parsing():
    from krafty.configs import UsageError, parse_add_config

    scrams, quotas = parse_add_config("SCRAM-SHA-256=[iterations=8192,password=p=w],"
                                      " producer_byte_rate=1024, consumer_byte_rate = 2e6")
    assert scrams == [("SCRAM-SHA-256", 8192, "p=w")]
    assert quotas == {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2e6}
    assert parse_add_config("scram-sha-512=[password=x]") == ([("SCRAM-SHA-512", 4096, "x")], {})
    for bad, match in (("producer_byte_rate=-1", "positive"), ("producer_byte_rate=fast", "positive"),
                       ("bogus_rate=1", "unknown config 'bogus_rate'"), ("SCRAM-SHA-1=[password=x]", "mechanism"),
                       ("SCRAM-SHA-256=[iterations=8192]", "password"), ("producer_byte_rate", "of the form"),
                       ("", "of the form")):
        with pytest.raises(UsageError, match=match):
            parse_add_config(bad)
