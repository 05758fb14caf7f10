"""SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677), sans-IO: both ends of the exchange
and the salted credentials the metadata log stores. Nonces are passed in by the caller.

Messages (RFC 5802 section 7):
    client-first  = gs2-header client-first-bare
    gs2-header    = ("n" | "y" | "p=" name) "," ["a=" authzid] ","
    client-first-bare = "n=" saslname ",r=" c-nonce ["," extensions]
    server-first  = "r=" c-nonce s-nonce ",s=" base64(salt) ",i=" iterations
    client-final  = "c=" base64(gs2-header) ",r=" nonce ["," extensions] ",p=" base64(proof)
    server-final  = "v=" base64(ServerSignature)
    AuthMessage   = client-first-bare "," server-first "," client-final-without-proof
    SaltedPassword = Hi(password, salt, i)   ClientKey = HMAC(SaltedPassword, "Client Key")
    StoredKey = H(ClientKey)   ServerKey = HMAC(SaltedPassword, "Server Key")
    proof = ClientKey XOR HMAC(StoredKey, AuthMessage)
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac

# Kafka's ScramMechanism ids (UserScramCredentialRecord.mechanism, AlterUserScramCredentials).
MECHANISMS: dict[str, tuple[str, int]] = {"SCRAM-SHA-256": ("sha256", 1), "SCRAM-SHA-512": ("sha512", 2)}
MECHANISM_BY_ID: dict[int, str] = {mid: name for name, (_, mid) in MECHANISMS.items()}
MIN_ITERATIONS = 4096  # RFC 7677 minimum; Kafka's too
MAX_ITERATIONS = 16384  # Kafka's upper bound for AlterUserScramCredentials
MAX_MESSAGE = 4096  # a client message longer than this is not a SCRAM message
DEFAULT_SALT_BYTES = 32  # what `krafty configs` makes (Kafka's own tools make ~26 base36 characters)
DEFAULT_ITERATIONS = 4096  # kafka-configs.sh's default
_BASE36 = b"0123456789abcdefghijklmnopqrstuvwxyz"


class ScramError(Exception):
    """The exchange failed. The text is for the broker's log only: clients get one generic
    message, so it never tells them which part (user, password, message) was wrong."""


@dataclasses.dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int
    decoy: bool = False  # made up for a user that does not exist: the exchange runs, then fails


@dataclasses.dataclass(frozen=True, slots=True)
class DecoyProfile:
    """What a decoy credential looks like: the shape most stored credentials of the mechanism have."""

    salt_bytes: int = DEFAULT_SALT_BYTES
    iterations: int = DEFAULT_ITERATIONS
    base36_salt: bool = False  # salts made by Java's ScramFormatter are base36 text, not random bytes


def decoy_profile(credentials) -> DecoyProfile:
    """The most common shape among ``credentials`` (salt, iterations pairs of one mechanism), so
    an unknown user's server-first message looks like most real users' (ties: the smaller
    iterations, then the shorter salt); the defaults of krafty's tools when there are none."""
    counts: dict[DecoyProfile, int] = {}
    for salt, iterations in credentials:
        p = DecoyProfile(len(salt), iterations, bool(salt) and all(b in _BASE36 for b in salt))
        counts[p] = counts.get(p, 0) + 1
    if not counts:
        return DecoyProfile()
    return min(counts, key=lambda p: (-counts[p], p.iterations, p.salt_bytes, p.base36_salt))


def decoy_credential(mechanism: str, username: str, seed: bytes, profile: DecoyProfile) -> ScramCredential:
    """The credential shown for a user that does not exist: derived from the cluster's decoy seed
    and the name, so every probe of a name, on every broker and after restarts, gets the same
    salt, as a real user does; salt length, alphabet and iterations follow ``profile``."""
    h = _hash(mechanism)

    def stream(label: str, n: int) -> bytes:
        out, i = b"", 0
        while len(out) < n:
            out += hmac.digest(seed, f"{label}\x00{mechanism}\x00{i}\x00{username}".encode(), h)
            i += 1
        return out[:n]

    salt = stream("salt", profile.salt_bytes)
    if profile.base36_salt:
        salt = bytes(_BASE36[b % 36] for b in salt)
    key = stream("key", hashlib.new(h).digest_size)
    return ScramCredential(salt, key, key, profile.iterations, decoy=True)


def _hash(mechanism: str) -> str:
    try:
        return MECHANISMS[mechanism][0]
    except KeyError:
        raise ScramError(f"unknown SCRAM mechanism {mechanism!r}") from None


def salted_password(mechanism: str, password: bytes, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(_hash(mechanism), password, salt, iterations)


def credential_from_salted(mechanism: str, salt: bytes, salted: bytes, iterations: int) -> ScramCredential:
    h = _hash(mechanism)
    client_key = hmac.digest(salted, b"Client Key", h)
    return ScramCredential(salt, hashlib.new(h, client_key).digest(), hmac.digest(salted, b"Server Key", h),
                           iterations)


def make_credential(mechanism: str, password: str, salt: bytes, iterations: int) -> ScramCredential:
    return credential_from_salted(mechanism, salt, salted_password(mechanism, password.encode(), salt, iterations),
                                  iterations)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise ScramError("invalid base64") from None


def escape_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def unescape_name(name: str) -> str:
    out, i = [], 0
    while i < len(name):
        c = name[i]
        if c == "=":
            code = name[i + 1:i + 3]
            if code == "2C":
                out.append(",")
            elif code == "3D":
                out.append("=")
            else:
                raise ScramError("invalid escape in saslname")
            i += 3
        elif c == ",":
            raise ScramError("unescaped ',' in saslname")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _attrs(text: str) -> list[tuple[str, str]]:
    out = []
    for part in text.split(","):
        if len(part) < 2 or part[1] != "=" or not part[0].isalpha():
            raise ScramError(f"malformed attribute {part[:20]!r}")
        out.append((part[0], part[2:]))
    return out


def _printable_nonce(nonce: str) -> bool:
    return bool(nonce) and all(0x21 <= ord(c) <= 0x7E and c != "," for c in nonce)


@dataclasses.dataclass(frozen=True, slots=True)
class ClientFirst:
    gs2_header: str
    bare: str
    username: str
    nonce: str
    extensions: dict[str, str]


def parse_client_first(data: bytes) -> ClientFirst:
    if len(data) > MAX_MESSAGE:
        raise ScramError("client-first message too long")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError("client-first message is not UTF-8") from None
    parts = text.split(",", 2)
    if len(parts) != 3:
        raise ScramError("client-first message has no gs2 header")
    cbind, authzid, bare = parts
    if cbind not in ("n", "y"):
        raise ScramError("channel binding is not supported")
    if authzid and not authzid.startswith("a="):
        raise ScramError("malformed authzid")
    attrs = _attrs(bare)
    if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r":
        raise ScramError("client-first-bare must start with n= and r=")
    username = unescape_name(attrs[0][1])
    if not username:
        raise ScramError("empty username")
    if authzid and unescape_name(authzid[2:]) != username:
        raise ScramError("authorization id differs from the username")
    nonce = attrs[1][1]
    if not _printable_nonce(nonce):
        raise ScramError("invalid client nonce")
    ext = {}
    for k, v in attrs[2:]:
        if k == "m":
            raise ScramError("mandatory extension not supported")
        ext[k] = v
    return ClientFirst(f"{cbind},{authzid},", bare, username, nonce, ext)


class ScramServer:
    """One server-side exchange: ``first(client_first)`` gives server-first, ``final(client_final)``
    gives server-final and sets ``username``, or raises ScramError.

    ``lookup`` gives the stored credential of the user the client names or, for an unknown
    user, a decoy (``decoy_credential``) that keeps the exchange going and then fails it as a
    wrong password does, so a client cannot tell the two apart. A lookup that returns None
    gets a decoy from ``decoy_key`` with the default profile."""

    def __init__(self, mechanism: str, lookup, server_nonce: str, decoy_key: bytes = b""):
        self.mechanism = mechanism
        self.hash = _hash(mechanism)
        self.lookup = lookup
        self.server_nonce = server_nonce
        self.decoy_key = decoy_key
        self.state = "first"
        self.username: str | None = None
        self._cred: ScramCredential | None = None
        self._real = False
        self._client_first: ClientFirst | None = None
        self._server_first = ""

    def first(self, data: bytes) -> bytes:
        if self.state != "first":
            raise ScramError("unexpected client-first message")
        self.state = "failed"
        cf = parse_client_first(data)
        if cf.extensions.get("tokenauth", "false").lower() == "true":
            raise ScramError("delegation tokens are not supported")
        cred = self.lookup(cf.username)
        if cred is None:
            cred = decoy_credential(self.mechanism, cf.username, self.decoy_key, DecoyProfile())
        self._real = not cred.decoy
        self._cred = cred
        self._client_first = cf
        self._server_first = f"r={cf.nonce}{self.server_nonce},s={_b64(cred.salt)},i={cred.iterations}"
        self.state = "final"
        return self._server_first.encode()

    def final(self, data: bytes) -> bytes:
        if self.state != "final":
            raise ScramError("unexpected client-final message")
        self.state = "failed"
        if len(data) > MAX_MESSAGE:
            raise ScramError("client-final message too long")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("client-final message is not UTF-8") from None
        head, sep, proof_b64 = text.rpartition(",p=")
        if not sep:
            raise ScramError("client-final message has no proof")
        attrs = _attrs(head)
        if len(attrs) < 2 or attrs[0][0] != "c" or attrs[1][0] != "r":
            raise ScramError("client-final message must start with c= and r=")
        cf, cred = self._client_first, self._cred
        assert cf is not None and cred is not None
        if _unb64(attrs[0][1]) != cf.gs2_header.encode():
            raise ScramError("channel binding does not match the gs2 header")
        nonce = cf.nonce + self.server_nonce
        # librdkafka < 2.6.1 (e.g. Debian's kcat) sends the client nonce twice (librdkafka#4895);
        # Kafka 3.8.1-3.9 accepted that, so do we: the server nonce is still checked
        if attrs[1][1] not in (nonce, cf.nonce + nonce):
            raise ScramError("nonce mismatch")
        proof = _unb64(proof_b64)
        auth_message = f"{cf.bare},{self._server_first},{head}".encode()
        client_signature = hmac.digest(cred.stored_key, auth_message, self.hash)
        if len(proof) != len(client_signature):
            raise ScramError("proof has the wrong length")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        ok = hmac.compare_digest(hashlib.new(self.hash, client_key).digest(), cred.stored_key)
        if not (ok and self._real):
            raise ScramError("invalid credentials")
        self.username = cf.username
        self.state = "done"
        return f"v={_b64(hmac.digest(cred.server_key, auth_message, self.hash))}".encode()


class ScramClient:
    """The client side (inter-broker replication, krafty's tools)."""

    def __init__(self, mechanism: str, username: str, password: str, nonce: str):
        self.mechanism = mechanism
        self.hash = _hash(mechanism)
        self.password = password.encode()
        self.nonce = nonce
        self.bare = f"n={escape_name(username)},r={nonce}"
        self._auth_message = b""
        self._salted = b""

    def first(self) -> bytes:
        return ("n,," + self.bare).encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode("utf-8", "replace")
        attrs = dict(_attrs(text))
        nonce, salt, iters = attrs.get("r", ""), _unb64(attrs.get("s", "")), attrs.get("i", "")
        if not nonce.startswith(self.nonce) or len(nonce) == len(self.nonce) or not iters.isdigit():
            raise ScramError("invalid server-first message")
        if int(iters) < MIN_ITERATIONS:
            raise ScramError(f"server asks for {iters} iterations, fewer than {MIN_ITERATIONS}")
        self._salted = salted_password(self.mechanism, self.password, salt, int(iters))
        head = f"c={_b64(b'n,,')},r={nonce}"
        self._auth_message = f"{self.bare},{text},{head}".encode()
        client_key = hmac.digest(self._salted, b"Client Key", self.hash)
        stored_key = hashlib.new(self.hash, client_key).digest()
        signature = hmac.digest(stored_key, self._auth_message, self.hash)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        return f"{head},p={_b64(proof)}".encode()

    def verify(self, server_final: bytes) -> None:
        attrs = dict(_attrs(server_final.decode("utf-8", "replace")))
        if "e" in attrs:
            raise ScramError(f"server refused: {attrs['e']}")
        server_key = hmac.digest(self._salted, b"Server Key", self.hash)
        expected = hmac.digest(server_key, self._auth_message, self.hash)
        if not hmac.compare_digest(_unb64(attrs.get("v", "")), expected):
            raise ScramError("server signature does not verify")
