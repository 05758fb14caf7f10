"""SASL on Kafka connections: the per-listener security settings, the server side of
SaslHandshake / SaslAuthenticate (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) with KIP-368
re-authentication, and the client side used by krafty's own connections (inter-broker
replication, the CLI).

Server side, as Kafka does it: on a SASL listener a connection that has not authenticated
may send ApiVersions (before the handshake), SaslHandshake, then SaslAuthenticate; anything
else closes the connection. A failed authentication gets SASL_AUTHENTICATION_FAILED with
one generic message (never which of user, password or message was wrong) and the
connection is closed. With ``connections.max.reauth.ms`` > 0 the session lifetime is sent in
the SaslAuthenticate response, and a connection that sends anything but a re-authentication
after it expired is closed. After SaslHandshake v0 the client sends bare SASL tokens (no
Kafka request header), as in Kafka before KIP-152.

PLAIN users come from the JAAS config of the listener
(``listener.name.<l>.plain.sasl.jaas.config``, else ``sasl.jaas.config``), Kafka's format:
``org.apache.kafka.common.security.plain.PlainLoginModule required username="admin"
password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";``.
SCRAM credentials come from the metadata log (AlterUserScramCredentials)."""

from __future__ import annotations

import base64
import dataclasses
import hmac
import logging
import re
import ssl
from collections.abc import Callable

from broker.protocol import codec
from broker.protocol.apis import ApiKey
from broker.security import scram
from common.clock import SYSTEM, Clock
from common.config import Config, ConfigError
from common.errors import ErrorCode

log = logging.getLogger("krafty.security")

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
AUTH_FAILED_MESSAGE = "Authentication failed: invalid credentials"
ANONYMOUS = "User:ANONYMOUS"
_SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
_TLS_PROTOCOLS = ("SSL", "SASL_SSL")

ScramLookup = Callable[[str, str], "scram.ScramCredential | None"]  # (user, mechanism) -> credential


# --- JAAS ---------------------------------------------------------------------------------

_JAAS_OPTION = re.compile(r'\s*([A-Za-z0-9_.\-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))')


def parse_jaas(text: str, key_name: str) -> tuple[str, dict[str, str]]:
    """``<LoginModule> <flag> k="v" ... ;`` -> (login module, options)."""
    m = re.match(r"\s*([A-Za-z0-9_.$]+)\s+(required|requisite|sufficient|optional)\b", text)
    if not m:
        raise ConfigError(f"configuration key '{key_name}': expected '<LoginModule> required key=\"value\" ...;'")
    pos, opts = m.end(), {}
    while True:
        om = _JAAS_OPTION.match(text, pos)
        if not om:
            break
        value = om.group(2) if om.group(2) is not None else om.group(3)
        opts[om.group(1)] = re.sub(r"\\(.)", r"\1", value)
        pos = om.end()
    if text[pos:].strip() not in (";", ""):
        # (the text itself is not shown: it holds passwords)
        raise ConfigError(f"configuration key '{key_name}': cannot parse the JAAS options at character {pos}; "
                          'expected key="value" pairs and a closing \';\'')
    return m.group(1), opts


def _jaas_key(listener: str, mechanism: str) -> str:
    return f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"


def listener_jaas(cfg: Config, listener: str, mechanism: str) -> dict[str, str] | None:
    text = cfg.listener_value(listener, f"{mechanism}.sasl.jaas.config")
    if not text:
        return None
    return parse_jaas(text, _jaas_key(listener, mechanism))[1]


# --- listener settings ----------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ListenerSecurity:
    name: str
    protocol: str  # PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
    ssl_context: ssl.SSLContext | None = None
    mechanisms: tuple[str, ...] = ()
    plain_users: dict[str, str] = dataclasses.field(default_factory=dict)
    reauth_ms: int = 0
    max_receive_size: int = 524_288
    # Kafka's connection.failed.authentication.delay.ms: the connection closes this long after
    # the failure reply (slows password guessing; lets the client read the reply before the close)
    failed_auth_delay_ms: int = 100

    @property
    def sasl(self) -> bool:
        return self.protocol in _SASL_PROTOCOLS


def listener_security(cfg: Config, listener: str) -> ListenerSecurity:
    """Validated security settings of one listener; a bad or missing value raises ConfigError
    naming the key."""
    from broker.security.ssl import server_context

    protocol = cfg["listener.security.protocol.map"].get(listener)
    if protocol is None:
        raise ConfigError(f"listener {listener} has no security protocol in 'listener.security.protocol.map'")
    ctx = server_context(cfg, listener) if protocol in _TLS_PROTOCOLS else None
    if protocol not in _SASL_PROTOCOLS:
        return ListenerSecurity(listener, protocol, ctx)
    mechs = tuple(m.upper() for m in cfg.listener_value(listener, "sasl.enabled.mechanisms"))
    bad = [m for m in mechs if m not in SUPPORTED_MECHANISMS]
    if bad or not mechs:
        raise ConfigError(f"configuration key 'sasl.enabled.mechanisms' (listener {listener}): "
                          f"{', '.join(bad) or 'empty'} not supported; krafty supports {', '.join(SUPPORTED_MECHANISMS)}")
    users: dict[str, str] = {}
    if "PLAIN" in mechs:
        opts = listener_jaas(cfg, listener, "PLAIN")
        if opts is None:
            raise ConfigError(f"listener {listener} enables PLAIN but '{_jaas_key(listener, 'PLAIN')}' "
                              "(or 'sasl.jaas.config') with user_<name>=\"<password>\" entries is not set")
        users = {k[5:]: v for k, v in opts.items() if k.startswith("user_") and len(k) > 5}
    return ListenerSecurity(listener, protocol, ctx, mechs, users,
                            cfg.listener_value(listener, "connections.max.reauth.ms"),
                            cfg.listener_value(listener, "sasl.server.max.receive.size"),
                            cfg["connection.failed.authentication.delay.ms"])


# --- server side ----------------------------------------------------------------------------

class SaslClose(codec.FramingError):
    """The connection must close (after sending the reply, if any)."""


def _plain_check(users: dict[str, str], token: bytes) -> str:
    """PLAIN (RFC 4616): ``[authzid] NUL authcid NUL passwd``; returns the user or raises."""
    parts = token.split(b"\x00")
    if len(parts) != 3:
        raise scram.ScramError("malformed PLAIN token")
    try:
        authzid, user, password = (p.decode("utf-8") for p in parts)
    except UnicodeDecodeError:
        raise scram.ScramError("PLAIN token is not UTF-8") from None
    if not user or (authzid and authzid != user):
        raise scram.ScramError("PLAIN authorization id differs from the user")
    expected = users.get(user)
    # compare even for unknown users, so timing does not tell them apart
    ok = hmac.compare_digest((expected or "\x00unknown").encode(), password.encode())
    if expected is None or not ok:
        raise scram.ScramError("invalid credentials")
    return user


class SaslSession:
    """SASL state of one connection on a SASL listener."""

    _DECOY_KEY = SYSTEM.secret_bytes(32)  # one per process: unknown users get stable decoy salts

    def __init__(self, sec: ListenerSecurity, scram_lookup: ScramLookup, *, client: str = "",
                 clock: Callable[[], float] = SYSTEM.monotonic, secrets: Clock = SYSTEM):
        self.sec = sec
        self.secrets = secrets  # where nonces come from (the node's Clock: its CSPRNG, seeded in simulation)
        self.scram_lookup = scram_lookup
        self.client = client
        self.clock = clock
        self.state = "handshake"  # handshake | authenticate | authenticated
        self.raw_tokens = False  # SaslHandshake v0: bare tokens follow
        self.mechanism: str | None = None
        self.principal: str | None = None
        self.expires_at: float | None = None
        self._scram: scram.ScramServer | None = None
        self.on_auth: Callable[[bool], None] | None = None  # told of each completed or failed authentication

    @property
    def authenticated(self) -> bool:
        return self.principal is not None

    # the entry point for every framed request on the connection
    def intercept(self, header: codec.RequestHeader, body: memoryview) -> tuple[list | None, bool]:
        """Returns ``(reply chunks, close_after)``; ``(None, False)`` lets the request through
        to the Kafka APIs. Raises SaslClose for a request this state does not allow."""
        key = header.api_key
        if key == ApiKey.SASL_HANDSHAKE:
            return self._handshake(header, body)
        if key == ApiKey.SASL_AUTHENTICATE:
            if self.state != "authenticate" or self.raw_tokens:
                raise SaslClose("SaslAuthenticate without a SaslHandshake")
            req = self._decode(header, body)
            return self._authenticate_reply(header, bytes(req.auth_bytes or b""))
        if self.state == "authenticated":
            if self.expires_at is not None and self.clock() > self.expires_at:
                raise SaslClose(f"SASL session of {self.principal} expired (connections.max.reauth.ms) "
                                "without re-authentication")
            return None, False
        if key == ApiKey.API_VERSIONS and self.state == "handshake" and not self.authenticated:
            return None, False
        raise SaslClose(f"unexpected {_api_name(key)} request from an unauthenticated client (state {self.state})")

    def raw_token(self, frame: bytes) -> tuple[bytes | None, bool]:
        """A bare SASL token after SaslHandshake v0: returns (reply token or None, close_after)."""
        ok, reply = self._counted_step(frame)
        if not ok:
            return None, True
        if self.state == "authenticated":
            self.raw_tokens = False
        return reply, False

    def _decode(self, header, body):
        try:
            return codec.decode_request(header.api_key, header.api_version, bytes(body), 0)
        except Exception as e:
            raise SaslClose(f"malformed {_api_name(header.api_key)} request: {e}") from None

    def _reply(self, header, data: dict) -> list:
        obj = codec.build_response(header.api_key, header.api_version, data)
        return [codec.response_header(header.api_key, header.api_version, header.correlation_id), codec.encode(obj)]

    def _handshake(self, header, body) -> tuple[list, bool]:
        if header.api_version > 1:
            raise SaslClose(f"SaslHandshake v{header.api_version} is not supported")
        if self.state == "authenticate":
            raise SaslClose("a second SaslHandshake during authentication")
        req = self._decode(header, body)
        mech = (req.mechanism or "").upper()
        mechs = list(self.sec.mechanisms)
        if mech not in self.sec.mechanisms:
            log.info("client %s asked for SASL mechanism %r; enabled: %s", self.client, req.mechanism, mechs)
            return self._reply(header, {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "mechanisms": mechs}), True
        if self.authenticated:  # KIP-368 re-authentication: same mechanism, v1 only
            if header.api_version == 0 or mech != self.mechanism:
                raise SaslClose("re-authentication must use SaslHandshake v1 and the same mechanism")
        self.mechanism = mech
        self.state = "authenticate"
        self.raw_tokens = header.api_version == 0
        self._scram = None
        return self._reply(header, {"error_code": ErrorCode.NONE, "mechanisms": mechs}), False

    def _authenticate_reply(self, header, token: bytes) -> tuple[list, bool]:
        ok, reply = self._counted_step(token)
        if not ok:
            return self._reply(header, {"error_code": ErrorCode.SASL_AUTHENTICATION_FAILED,
                                        "error_message": AUTH_FAILED_MESSAGE, "auth_bytes": b""}), True
        lifetime = 0
        if self.state == "authenticated" and self.sec.reauth_ms > 0:
            lifetime = self.sec.reauth_ms
        return self._reply(header, {"error_code": ErrorCode.NONE, "auth_bytes": reply or b"",
                                    "session_lifetime": lifetime}), False

    def _counted_step(self, token: bytes) -> tuple[bool, bytes | None]:
        ok, reply = self._step(token)
        if self.on_auth is not None and (not ok or self.state == "authenticated"):
            self.on_auth(ok)  # successful/failed authentications (broker metrics)
        return ok, reply

    def _step(self, token: bytes) -> tuple[bool, bytes | None]:
        """One client token; returns (ok, server token). On success of the last step the
        session becomes authenticated."""
        if len(token) > self.sec.max_receive_size:
            log.info("SASL token of %d bytes from %s exceeds sasl.server.max.receive.size", len(token), self.client)
            return False, None
        try:
            if self.mechanism == "PLAIN":
                return True, self._done(_plain_check(self.sec.plain_users, token), b"")
            if self._scram is None:
                self._scram = scram.ScramServer(self.mechanism, lambda u: self.scram_lookup(u, self.mechanism),
                                                _nonce(self.secrets), self._DECOY_KEY)
                return True, self._scram.first(token)
            final = self._scram.final(token)
            return True, self._done(self._scram.username, final)
        except scram.ScramError as e:
            log.info("SASL %s authentication from %s failed: %s", self.mechanism, self.client, e)
            self.state = "failed"
            return False, None

    def _done(self, user: str, reply: bytes) -> bytes:
        principal = f"User:{user}"
        if self.principal is not None and principal != self.principal:
            raise scram.ScramError(f"re-authentication as {principal} on a connection of {self.principal}")
        self.principal = principal
        self.state = "authenticated"
        self._scram = None
        self.expires_at = self.clock() + self.sec.reauth_ms / 1000 if self.sec.reauth_ms > 0 else None
        return reply


def _api_name(key: int) -> str:
    try:
        return ApiKey(key).name
    except ValueError:
        return f"api {key}"


# --- client side ----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ClientSecurity:
    """How krafty connects to a Kafka listener as a client."""

    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None


class SaslClientError(ConnectionError):
    pass


def _nonce(clock: Clock) -> str:
    """A SCRAM nonce: 18 random bytes in URL-safe base64 (as ``secrets.token_urlsafe(18)``)."""
    return base64.urlsafe_b64encode(clock.secret_bytes(18)).decode()


async def client_authenticate(roundtrip, sec: ClientSecurity, clock: Clock = SYSTEM) -> int:
    """Runs SaslHandshake v1 + SaslAuthenticate v2 over ``roundtrip(api_key, version, data)``;
    returns the session lifetime (ms, 0 = unlimited) or raises SaslClientError."""
    res = await roundtrip(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": sec.mechanism})
    if res.error_code != 0:
        raise SaslClientError(f"SASL handshake for {sec.mechanism} refused: {res.error_code!r} "
                              f"(broker offers {list(res.mechanisms)})")

    async def step(token: bytes):
        r = await roundtrip(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token})
        if r.error_code != 0:
            # an operator problem (wrong inter-broker credentials): say so where it is seen
            log.warning("SASL %s authentication as %s failed: %s", sec.mechanism, sec.username,
                        r.error_message or r.error_code)
            raise SaslClientError(f"SASL {sec.mechanism} authentication as {sec.username} failed: "
                                  f"{r.error_message or r.error_code!r}")
        return r

    if sec.mechanism == "PLAIN":
        r = await step(b"\x00" + (sec.username or "").encode() + b"\x00" + (sec.password or "").encode())
    else:
        client = scram.ScramClient(sec.mechanism, sec.username or "", sec.password or "", _nonce(clock))
        r = await step(client.first())
        r = await step(client.final(bytes(r.auth_bytes)))
        try:
            client.verify(bytes(r.auth_bytes))
        except scram.ScramError as e:
            raise SaslClientError(f"broker failed SCRAM server verification: {e}") from None
    lifetime = getattr(r, "session_lifetime", 0)
    return int(lifetime.total_seconds() * 1000) if hasattr(lifetime, "total_seconds") else int(lifetime or 0)


def inter_broker_security(cfg: Config) -> ClientSecurity:
    """How this broker's replica fetchers connect to the other brokers: over
    ``inter.broker.listener.name``, with its TLS settings and, for SASL, the mechanism
    ``sasl.mechanism.inter.broker.protocol`` and the ``username``/``password`` of that
    listener's JAAS config (``listener.name.<l>.<mechanism>.sasl.jaas.config``), as Kafka does."""
    from broker.security.ssl import client_context

    listener = cfg["inter.broker.listener.name"].upper()
    protocol = cfg["listener.security.protocol.map"].get(listener, "PLAINTEXT")
    ctx = client_context(cfg, listener) if protocol in _TLS_PROTOCOLS else None
    if protocol not in _SASL_PROTOCOLS:
        return ClientSecurity(protocol, ctx)
    mech = cfg["sasl.mechanism.inter.broker.protocol"].upper()
    if mech not in SUPPORTED_MECHANISMS:
        raise ConfigError(f"configuration key 'sasl.mechanism.inter.broker.protocol': {mech} is not supported "
                          f"(inter-broker listener {listener} is {protocol}); use one of "
                          f"{', '.join(SUPPORTED_MECHANISMS)}")
    opts = listener_jaas(cfg, listener, mech) or {}
    if not opts.get("username") or "password" not in opts:
        raise ConfigError(f"inter-broker listener {listener} uses SASL {mech}: set username=\"...\" password=\"...\" "
                          f"in '{_jaas_key(listener, mech)}'")
    return ClientSecurity(protocol, ctx, mech, opts["username"], opts["password"])


def client_security_from_properties(props: dict[str, str]) -> ClientSecurity:
    """Client settings in Kafka client property names (``--command-config`` files):
    security.protocol, sasl.mechanism, sasl.jaas.config (or sasl.username/sasl.password),
    ssl.truststore.location / ssl.ca.location, ssl.keystore.location (PEM),
    ssl.endpoint.identification.algorithm."""
    from broker.security.ssl import client_context

    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in ("PLAINTEXT", *_TLS_PROTOCOLS, *_SASL_PROTOCOLS):
        raise ConfigError(f"client property 'security.protocol': unknown protocol {protocol!r}")
    ctx = None
    if protocol in _TLS_PROTOCOLS:
        values = {"node.id": "0"}
        if props.get("ssl.ca.location"):
            values["ssl.truststore.location"] = props["ssl.ca.location"]
        for k in ("ssl.truststore.location", "ssl.truststore.type", "ssl.truststore.password", "ssl.keystore.location",
                  "ssl.keystore.type", "ssl.keystore.password", "ssl.key.password",
                  "ssl.endpoint.identification.algorithm"):
            if k in props:
                values[k] = props[k]
        values.setdefault("ssl.keystore.type", "PEM")
        ctx = client_context(Config(values, warn_unknown=False), None)
    if protocol not in _SASL_PROTOCOLS:
        return ClientSecurity(protocol, ctx)
    mech = props.get("sasl.mechanism", "GSSAPI").upper()
    if mech not in SUPPORTED_MECHANISMS:
        raise ConfigError(f"client property 'sasl.mechanism': {mech} is not supported")
    user, password = props.get("sasl.username"), props.get("sasl.password")
    if props.get("sasl.jaas.config"):
        opts = parse_jaas(props["sasl.jaas.config"], "sasl.jaas.config")[1]
        user, password = opts.get("username", user), opts.get("password", password)
    if not user or password is None:
        raise ConfigError("client properties: SASL needs sasl.jaas.config with username/password "
                          "(or sasl.username and sasl.password)")
    return ClientSecurity(protocol, ctx, mech, user, password)

