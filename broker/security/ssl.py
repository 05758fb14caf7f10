"""TLS for listeners, inter-broker connections and the controller's gRPC, configured with
Kafka's ``ssl.*`` keys (each may be given per listener as ``listener.name.<l>.ssl.*``).

Keystores: ``ssl.keystore.type`` PEM (a file with the private key and the certificate
chain, or the inline ``ssl.keystore.key`` + ``ssl.keystore.certificate.chain``; an encrypted
key is opened with ``ssl.key.password``) or PKCS12 (needs the ``cryptography`` package).
JKS is refused with a message saying how to convert it. Truststores: PEM file, inline
``ssl.truststore.certificates``, or PKCS12.

Kafka connections keep using raw non-blocking sockets (broker/server.py): ``TlsIO`` runs
OpenSSL on the socket's fd (an ``ssl.SSLSocket`` driven by the event loop), so the plaintext
and TLS paths share one connection loop. TLS cannot use sendfile (no kernel TLS); file regions
are read and encrypted."""

from __future__ import annotations

import asyncio
import os
import re
import ssl
import tempfile

from common.config import Config, ConfigError

# plaintext asked of the session per read: one TLS record's at most (a read returns one record;
# asking for more allocates a larger buffer each time only to shrink it)
_TLS_RECORD = 16 * 1024
_PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def _val(cfg: Config, listener: str | None, key: str):
    return cfg.listener_value(listener, key) if listener else cfg[key]


def _key_name(listener: str | None, key: str) -> str:
    return f"listener.name.{listener.lower()}.{key}" if listener else key


def _pkcs12(path: str, password: str | None, key_name: str):
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.serialization import pkcs12
    except ImportError:
        raise ConfigError(f"configuration key '{key_name}': PKCS12 stores need the 'cryptography' package; "
                          "install it or use ssl.keystore.type=PEM") from None
    try:
        with open(path, "rb") as f:
            key, cert, extra = pkcs12.load_key_and_certificates(f.read(), password.encode() if password else None)
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read PKCS12 store {path} (configuration key '{key_name}'): {e}") from None
    pem_key = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()) if key is not None else b""
    certs = ([cert] if cert is not None else []) + list(extra or [])
    return pem_key, b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


def _load_keystore(ctx: ssl.SSLContext, cfg: Config, listener: str | None, required: bool) -> bool:
    kind = (_val(cfg, listener, "ssl.keystore.type") or "PKCS12").upper()
    location = _val(cfg, listener, "ssl.keystore.location")
    inline_key = _val(cfg, listener, "ssl.keystore.key")
    inline_chain = _val(cfg, listener, "ssl.keystore.certificate.chain")
    key_password = _val(cfg, listener, "ssl.key.password")
    store_password = _val(cfg, listener, "ssl.keystore.password")
    loc_key = _key_name(listener, "ssl.keystore.location")
    if not location and not inline_key:
        if required:
            raise ConfigError(f"listener {listener} uses TLS but neither '{loc_key}' nor "
                              f"'{_key_name(listener, 'ssl.keystore.key')}' is set")
        return False
    if kind == "JKS":
        raise ConfigError(f"configuration key '{_key_name(listener, 'ssl.keystore.type')}': JKS is not supported; "
                          "convert it with keytool -importkeystore -deststoretype PKCS12, or use PEM")
    if kind not in ("PEM", "PKCS12"):
        raise ConfigError(f"configuration key '{_key_name(listener, 'ssl.keystore.type')}': unknown type {kind!r} "
                          "(expected PEM or PKCS12)")
    if inline_key:
        if kind != "PEM" or not inline_chain:
            raise ConfigError(f"'{_key_name(listener, 'ssl.keystore.key')}' needs ssl.keystore.type=PEM and "
                              f"'{_key_name(listener, 'ssl.keystore.certificate.chain')}'")
        _load_pem_pair(ctx, inline_key.encode(), inline_chain.encode(), key_password, loc_key)
        return True
    if kind == "PKCS12":
        pem_key, pem_chain = _pkcs12(location, store_password, loc_key)
        _load_pem_pair(ctx, pem_key, pem_chain, None, loc_key)
        return True
    try:
        ctx.load_cert_chain(location, password=key_password or store_password)
    except FileNotFoundError:
        raise ConfigError(f"configuration key '{loc_key}': no such file {location}") from None
    except (ssl.SSLError, OSError) as e:
        raise ConfigError(f"configuration key '{loc_key}': cannot load the key and certificate chain from "
                          f"{location} ({e}); is '{_key_name(listener, 'ssl.key.password')}' right?") from None
    return True


def _load_pem_pair(ctx, key: bytes, chain: bytes, password: str | None, key_name: str) -> None:
    # the ssl module loads keys from files only: a private temporary file, removed at once
    fd, path = tempfile.mkstemp(prefix="krafty-key-", suffix=".pem")
    try:
        os.write(fd, key.rstrip() + b"\n" + chain)
        os.close(fd)
        ctx.load_cert_chain(path, password=password)
    except (ssl.SSLError, OSError) as e:
        raise ConfigError(f"configuration key '{key_name}': cannot load the key and certificate chain ({e})") from None
    finally:
        os.unlink(path)


def _load_truststore(ctx: ssl.SSLContext, cfg: Config, listener: str | None) -> bool:
    kind = (_val(cfg, listener, "ssl.truststore.type") or "PEM").upper()
    location = _val(cfg, listener, "ssl.truststore.location")
    inline = _val(cfg, listener, "ssl.truststore.certificates")
    loc_key = _key_name(listener, "ssl.truststore.location")
    try:
        if inline:
            ctx.load_verify_locations(cadata=inline)
            return True
        if not location:
            return False
        if kind == "JKS":
            raise ConfigError(f"configuration key '{_key_name(listener, 'ssl.truststore.type')}': JKS is not "
                              "supported; convert it to PKCS12 or PEM")
        if kind == "PKCS12":
            _, pem = _pkcs12(location, _val(cfg, listener, "ssl.truststore.password"), loc_key)
            ctx.load_verify_locations(cadata=pem.decode())
        else:
            ctx.load_verify_locations(cafile=location)
        return True
    except FileNotFoundError:
        raise ConfigError(f"configuration key '{loc_key}': no such file {location}") from None
    except (ssl.SSLError, OSError, ValueError) as e:
        raise ConfigError(f"configuration key '{loc_key}': cannot load trusted certificates ({e})") from None


def _protocols(ctx: ssl.SSLContext, cfg: Config, listener: str | None) -> None:
    enabled = _val(cfg, listener, "ssl.enabled.protocols")
    versions = []
    for p in enabled:
        if p not in _PROTOCOLS:
            raise ConfigError(f"configuration key '{_key_name(listener, 'ssl.enabled.protocols')}': unsupported "
                              f"protocol {p!r} (expected TLSv1.2 and/or TLSv1.3)")
        versions.append(_PROTOCOLS[p])
    ctx.minimum_version, ctx.maximum_version = min(versions), max(versions)
    ciphers = _val(cfg, listener, "ssl.cipher.suites")
    if ciphers:
        try:
            ctx.set_ciphers(":".join(ciphers))
        except ssl.SSLError:
            raise ConfigError(f"configuration key '{_key_name(listener, 'ssl.cipher.suites')}': no usable cipher "
                              f"in {ciphers}") from None


def server_context(cfg: Config, listener: str) -> ssl.SSLContext:
    """The TLS context of a listener whose protocol is SSL or SASL_SSL."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _protocols(ctx, cfg, listener)
    _load_keystore(ctx, cfg, listener, required=True)
    auth = _val(cfg, listener, "ssl.client.auth")
    has_trust = _load_truststore(ctx, cfg, listener)
    if auth != "none" and not has_trust:
        raise ConfigError(f"'{_key_name(listener, 'ssl.client.auth')}={auth}' needs a truststore: set "
                          f"'{_key_name(listener, 'ssl.truststore.location')}'")
    ctx.verify_mode = _CLIENT_AUTH[auth]
    return ctx


def client_context(cfg: Config, listener: str | None) -> ssl.SSLContext:
    """The TLS context this node uses to connect to ``listener`` of another node (inter-broker
    replication, controllers): trusts the listener's truststore (or the system's), presents the
    keystore when one is configured, checks the host name unless
    ssl.endpoint.identification.algorithm is empty."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _protocols(ctx, cfg, listener)
    if not _load_truststore(ctx, cfg, listener):
        ctx.load_default_certs()
    _load_keystore(ctx, cfg, listener, required=False)
    ctx.check_hostname = (_val(cfg, listener, "ssl.endpoint.identification.algorithm") or "").lower() == "https"
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


_RDN_NAMES = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU", "countryName": "C",
              "localityName": "L", "stateOrProvinceName": "ST", "domainComponent": "DC", "userId": "UID",
              "streetAddress": "STREET"}


def _escape_dn(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;=' else c for c in value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def subject_dn(cert: dict | None) -> str | None:
    """The RFC 2253 subject of a peer certificate (``getpeercert()`` form), as Java's
    ``X500Principal.getName()`` renders it: Kafka's SSL principal is ``User:<this>``."""
    if not cert or "subject" not in cert:
        return None
    rdns = []
    for rdn in reversed(cert["subject"]):
        rdns.append("+".join(f"{_RDN_NAMES.get(k, k)}={_escape_dn(v)}" for k, v in rdn))
    return ",".join(rdns)


class TlsIO:
    """A TLS session over a connected non-blocking socket, driven by the event loop.

    OpenSSL reads and writes the socket itself (an ``ssl.SSLSocket`` over the socket's fd): a
    record is read off the kernel straight into OpenSSL's buffer and decrypted from there, and
    written to the kernel as it is encrypted, with no memory-BIO copy either way (the copies
    came to a third of the TLS path's CPU per MB). ``sock`` is the socket to use from now on
    (the one given is detached)."""

    def __init__(self, sock, ctx: ssl.SSLContext, *, server_side: bool, server_hostname: str | None = None):
        self.loop = asyncio.get_running_loop()
        self.sock = ctx.wrap_socket(sock, server_side=server_side, server_hostname=server_hostname,
                                    do_handshake_on_connect=False)

    def _ready(self, write: bool) -> asyncio.Future:
        """A future done once the socket is readable (or writable)."""
        fut = self.loop.create_future()
        fd = self.sock.fileno()
        add, remove = (self.loop.add_writer, self.loop.remove_writer) if write else (
            self.loop.add_reader, self.loop.remove_reader)

        def ready() -> None:
            remove(fd)
            if not fut.done():
                fut.set_result(None)
        add(fd, ready)
        fut.add_done_callback(lambda _f: remove(fd))
        return fut

    async def handshake(self, timeout: float) -> None:
        async def run() -> None:
            while True:
                try:
                    self.sock.do_handshake()
                    return
                except ssl.SSLWantReadError:
                    await self._ready(False)
                except ssl.SSLWantWriteError:
                    await self._ready(True)
        try:
            await asyncio.wait_for(run(), timeout)
        except TimeoutError:
            raise ConnectionError("TLS handshake timed out") from None

    def peer_dn(self) -> str | None:
        try:
            return subject_dn(self.sock.getpeercert())
        except ValueError:
            return None

    def buffered(self) -> bool:
        """Whether plaintext already decrypted waits to be read."""
        return self.sock.pending() > 0

    def feed(self, sock, chunks: list, read: bool = True) -> int | None:
        """The connection's reader (broker/server.py): decrypts every whole record the socket
        has and appends the plaintext to ``chunks``. Returns the bytes appended, None at the
        end of the stream (with nothing appended)."""
        got = 0
        recv = self.sock.recv
        while True:
            try:
                plain = recv(_TLS_RECORD)
            except (ssl.SSLWantReadError, BlockingIOError, InterruptedError):
                break
            except ssl.SSLWantWriteError:  # the session must write first (renegotiation): on the next event
                break
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return got or None
            if not plain:
                return got or None
            chunks.append(plain)
            got += len(plain)
        return got

    async def sendall(self, data) -> None:
        view = memoryview(data)
        send = self.sock.send
        while view:
            try:
                n = send(view)
            except ssl.SSLWantWriteError:
                await self._ready(True)
                continue
            except ssl.SSLWantReadError:
                # the session reads first (a renegotiation): the connection's reader feeds it
                await asyncio.sleep(0.005)
                continue
            except (BlockingIOError, InterruptedError):
                await self._ready(True)
                continue
            view = view[n:]

    async def sendfile(self, fd: int, offset: int, size: int) -> None:
        # no kernel TLS here: read the log region and encrypt it (bounded chunks)
        while size > 0:
            chunk = os.pread(fd, min(size, 1 << 20), offset)
            if not chunk:
                raise ConnectionError("log segment ended before the promised fetch size")
            await self.sendall(chunk)
            offset += len(chunk)
            size -= len(chunk)


# --- controller gRPC ---------------------------------------------------------------------------

_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----.+?-----END \1-----\s*", re.S)


def _pem_key_and_chain(cfg: Config, listener: str) -> tuple[bytes, bytes]:
    """The private key (unencrypted PEM, as gRPC needs) and certificate chain of a listener."""
    kind = (_val(cfg, listener, "ssl.keystore.type") or "PKCS12").upper()
    location = _val(cfg, listener, "ssl.keystore.location")
    loc_key = _key_name(listener, "ssl.keystore.location")
    password = _val(cfg, listener, "ssl.key.password")
    if _val(cfg, listener, "ssl.keystore.key"):
        key, chain = _val(cfg, listener, "ssl.keystore.key").encode(), \
            (_val(cfg, listener, "ssl.keystore.certificate.chain") or "").encode()
    elif not location:
        raise ConfigError(f"controller listener {listener} uses SSL but '{loc_key}' is not set")
    elif kind == "PKCS12":
        return _pkcs12(location, _val(cfg, listener, "ssl.keystore.password"), loc_key)
    elif kind != "PEM":
        raise ConfigError(f"configuration key '{_key_name(listener, 'ssl.keystore.type')}': the controller listener "
                          "takes PEM or PKCS12")
    else:
        try:
            with open(location, "rb") as f:
                data = f.read()
        except OSError as e:
            raise ConfigError(f"configuration key '{loc_key}': cannot read {location}: {e.strerror}") from None
        blocks = [(m.group(1), m.group(0)) for m in _PEM_BLOCK.finditer(data)]
        key = b"".join(b for t, b in blocks if t.endswith(b"PRIVATE KEY"))
        chain = b"".join(b for t, b in blocks if t == b"CERTIFICATE")
    if not key or not chain:
        raise ConfigError(f"configuration key '{loc_key}': needs a private key and a certificate chain (PEM)")
    if b"ENCRYPTED" in key:
        try:
            from cryptography.hazmat.primitives import serialization
        except ImportError:
            raise ConfigError(f"controller listener {listener}: gRPC needs an unencrypted private key; decrypt it "
                              "(openssl pkcs8) or install the 'cryptography' package") from None
        try:
            k = serialization.load_pem_private_key(key, (password or "").encode() or None)
        except (ValueError, TypeError) as e:
            raise ConfigError(f"configuration key '{_key_name(listener, 'ssl.key.password')}': cannot decrypt the "
                              f"controller key ({e})") from None
        key = k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption())
    return key, chain


def _pem_trust(cfg: Config, listener: str) -> bytes | None:
    inline = _val(cfg, listener, "ssl.truststore.certificates")
    if inline:
        return inline.encode()
    location = _val(cfg, listener, "ssl.truststore.location")
    if not location:
        return None
    loc_key = _key_name(listener, "ssl.truststore.location")
    if (_val(cfg, listener, "ssl.truststore.type") or "PEM").upper() == "PKCS12":
        return _pkcs12(location, _val(cfg, listener, "ssl.truststore.password"), loc_key)[1]
    try:
        with open(location, "rb") as f:
            return f.read()
    except OSError as e:
        raise ConfigError(f"configuration key '{loc_key}': cannot read {location}: {e.strerror}") from None


def controller_grpc_credentials(cfg: Config):
    """gRPC TLS of the controller quorum and of brokers' controller channel, from the controller
    listener (the first of ``controller.listener.names``) as Kafka configures it: its protocol in
    ``listener.security.protocol.map`` (PLAINTEXT or SSL) and its ``listener.name.<l>.ssl.*`` keys
    (or the global ssl.* keys). Controllers serve with the keystore and, with
    ``ssl.client.auth=required``, demand a certificate from the truststore's CA (mutual TLS);
    every node connects with the truststore and presents its keystore. Returns
    (server credentials or None, channel credentials or None)."""
    import grpc

    listener = cfg["controller.listener.names"][0].upper()
    protocol = cfg["listener.security.protocol.map"].get(listener, "PLAINTEXT")
    if protocol == "PLAINTEXT":
        return None, None
    if protocol != "SSL":
        raise ConfigError(f"controller listener {listener} is mapped to {protocol} in 'listener.security.protocol.map'; "
                          "krafty's controller listener supports PLAINTEXT or SSL")
    trust = _pem_trust(cfg, listener)
    key, chain = _pem_key_and_chain(cfg, listener)
    auth = _val(cfg, listener, "ssl.client.auth")
    if auth != "none" and trust is None:
        raise ConfigError(f"'{_key_name(listener, 'ssl.client.auth')}={auth}' needs "
                          f"'{_key_name(listener, 'ssl.truststore.location')}'")
    server = None
    if "controller" in cfg["process.roles"]:
        server = grpc.ssl_server_credentials([(key, chain)], root_certificates=trust,
                                             require_client_auth=auth == "required")
    channel = grpc.ssl_channel_credentials(root_certificates=trust, private_key=key, certificate_chain=chain)
    return server, channel
