"""Java KeyStore (JKS) files, read without Java: trusted certificates and private keys as PEM.

Kafka's Java clients and brokers take ``ssl.keystore.type``/``ssl.truststore.type`` JKS (their
default before PKCS12). The format (sun.security.provider.JavaKeyStore)::

    magic 0xFEEDFEED | version int32 (1 or 2) | count int32 | entry* | SHA-1 digest (20 bytes)
    entry: tag int32 | alias (Java modified UTF-8: uint16 length + bytes) | date int64 | body
      tag 1, a private key:  int32 length + EncryptedPrivateKeyInfo (DER) | int32 chain length |
                             (v2: type UTF) int32 length + certificate (DER) per certificate
      tag 2, a trusted certificate: (v2: type UTF) int32 length + certificate (DER)

The digest is SHA-1(password as UTF-16BE + b"Mighty Aphrodite" + everything before it). A private
key is protected with Sun's KeyProtector (OID 1.3.6.1.4.1.42.2.17.1.1): the encrypted data is
salt (20) + key XOR keystream + check (20), where the keystream is the chain of
SHA-1(password UTF-16BE + previous digest) starting from the salt, and the check is
SHA-1(password UTF-16BE + the plain PKCS#8 key).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import struct

MAGIC = 0xFEEDFEED
JCEKS_MAGIC = 0xCECECECE
KEY_PROTECTOR_OID = bytes.fromhex("2b060104012a02110101")  # 1.3.6.1.4.1.42.2.17.1.1


class JksError(ValueError):
    """A JKS file that cannot be read: its message says why (never the password)."""


def is_jks(data: bytes) -> bool:
    return len(data) >= 4 and struct.unpack_from(">I", data)[0] in (MAGIC, JCEKS_MAGIC)


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise JksError("the keystore is truncated")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def u16(self) -> int:
        return struct.unpack(">H", self.take(2))[0]

    def i32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def utf(self) -> str:
        return self.take(self.u16()).decode("utf-8", "replace")


def _pem(kind: str, der: bytes) -> bytes:
    b64 = base64.encodebytes(der).replace(b"\n", b"")
    lines = [b64[i:i + 64] for i in range(0, len(b64), 64)]
    return b"-----BEGIN " + kind.encode() + b"-----\n" + b"\n".join(lines) + b"\n-----END " + kind.encode() + b"-----\n"


def _der(data: bytes, pos: int) -> tuple[int, int, int]:
    """(tag, start of content, end of content) of the DER element at ``pos``."""
    if pos + 2 > len(data):
        raise JksError("a private key entry is not valid DER")
    tag, n = data[pos], data[pos + 1]
    pos += 2
    if n & 0x80:
        k = n & 0x7F
        if k == 0 or k > 4 or pos + k > len(data):
            raise JksError("a private key entry is not valid DER")
        n = int.from_bytes(data[pos:pos + k], "big")
        pos += k
    if pos + n > len(data):
        raise JksError("a private key entry is not valid DER")
    return tag, pos, pos + n


def _unprotect(epki: bytes, password: str, alias: str) -> bytes:
    """The PKCS#8 PrivateKeyInfo inside a KeyProtector-encrypted EncryptedPrivateKeyInfo."""
    tag, start, _ = _der(epki, 0)  # EncryptedPrivateKeyInfo ::= SEQUENCE
    tag_alg, alg_start, alg_end = _der(epki, start)  # AlgorithmIdentifier ::= SEQUENCE
    _, oid_start, oid_end = _der(epki, alg_start)
    if epki[oid_start:oid_end] != KEY_PROTECTOR_OID:
        raise JksError(f"the private key {alias!r} is protected with an algorithm other than Sun's "
                       "KeyProtector (convert the store to PKCS12)")
    tag_oct, data_start, data_end = _der(epki, alg_end)
    if tag != 0x30 or tag_alg != 0x30 or tag_oct != 0x04:
        raise JksError(f"the private key {alias!r} is not an EncryptedPrivateKeyInfo")
    enc = epki[data_start:data_end]
    if len(enc) < 40:
        raise JksError(f"the private key {alias!r} is truncated")
    salt, body, check = enc[:20], enc[20:-20], enc[-20:]
    pw = password.encode("utf-16-be")
    stream = bytearray()
    digest = salt
    while len(stream) < len(body):
        digest = hashlib.sha1(pw + digest).digest()
        stream += digest
    plain = bytes(a ^ b for a, b in zip(body, stream, strict=False))
    if not hmac.compare_digest(hashlib.sha1(pw + plain).digest(), check):
        raise JksError(f"cannot decrypt the private key {alias!r}: wrong key password")
    return plain


def read_jks(data: bytes, store_password: str | None, key_password: str | None = None):
    """(private keys as [(alias, PKCS#8 PEM, certificate chain PEM)], trusted certificates PEM).

    The store's integrity digest is checked when ``store_password`` is given (Java checks it
    only then, too); private keys are opened with ``key_password``, else the store password."""
    r = _Reader(data)
    magic = struct.unpack(">I", r.take(4))[0]
    if magic == JCEKS_MAGIC:
        raise JksError("this is a JCEKS keystore; convert it with keytool -importkeystore -deststoretype PKCS12")
    if magic != MAGIC:
        raise JksError("not a JKS keystore (bad magic number)")
    version = r.i32()
    if version not in (1, 2):
        raise JksError(f"unknown JKS version {version}")
    count = r.i32()
    if count < 0:
        raise JksError("the keystore is corrupt (negative entry count)")
    keys, trusted = [], []
    for _ in range(count):
        tag = r.i32()
        alias = r.utf()
        r.take(8)  # creation date
        if tag == 1:
            epki = r.take(r.i32())
            chain = []
            for _ in range(r.i32()):
                if version == 2:
                    r.utf()  # "X.509"
                chain.append(r.take(r.i32()))
            keys.append((alias, epki, chain))
        elif tag == 2:
            if version == 2:
                r.utf()
            trusted.append(r.take(r.i32()))
        else:
            raise JksError(f"entry {alias!r} has an unknown tag {tag}")
    body_end = r.pos
    digest = r.take(20)
    if store_password is not None:
        want = hashlib.sha1(store_password.encode("utf-16-be") + b"Mighty Aphrodite" + data[:body_end]).digest()
        if not hmac.compare_digest(want, digest):
            raise JksError("keystore password was incorrect (the JKS integrity check failed)")
    out_keys = []
    for alias, epki, chain in keys:
        pw = key_password if key_password is not None else store_password
        if pw is None:
            raise JksError(f"the private key {alias!r} needs a password (ssl.key.password or the store's)")
        pkcs8 = _unprotect(epki, pw, alias)
        out_keys.append((alias, _pem("PRIVATE KEY", pkcs8), b"".join(_pem("CERTIFICATE", c) for c in chain)))
    return out_keys, b"".join(_pem("CERTIFICATE", c) for c in trusted)
