"""A throwaway certificate authority for the TLS tests, made with the openssl CLI:
a CA, a server certificate for 127.0.0.1/localhost (key optionally encrypted), and client
certificates for mutual TLS. Everything is PEM, in a directory of the caller's choosing."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path


def _run(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@dataclasses.dataclass
class TestCA:
    dir: Path
    ca_cert: Path
    ca_key: Path

    def issue(self, name: str, cn: str, *, server: bool = False, key_password: str | None = None) -> tuple[Path, Path]:
        """Returns (certificate, key); the key is encrypted (PKCS#8) when key_password is set."""
        key, csr, cert, ext = (self.dir / f"{name}.key", self.dir / f"{name}.csr", self.dir / f"{name}.crt",
                               self.dir / f"{name}.ext")
        _run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key.name, cwd=self.dir)
        _run("req", "-new", "-key", key.name, "-subj", f"/O=krafty-test/CN={cn}", "-out", csr.name, cwd=self.dir)
        lines = ["basicConstraints=CA:FALSE"]
        if server:
            lines += ["subjectAltName=IP:127.0.0.1,DNS:localhost", "extendedKeyUsage=serverAuth,clientAuth"]
        else:
            lines += ["extendedKeyUsage=clientAuth"]
        ext.write_text("\n".join(lines) + "\n")
        _run("x509", "-req", "-in", csr.name, "-CA", self.ca_cert.name, "-CAkey", self.ca_key.name,
             "-CAcreateserial", "-days", "2", "-sha256", "-extfile", ext.name, "-out", cert.name, cwd=self.dir)
        if key_password:
            enc = self.dir / f"{name}.enc.key"
            _run("pkcs8", "-topk8", "-in", key.name, "-out", enc.name, "-v2", "aes-256-cbc",
                 "-passout", f"pass:{key_password}", cwd=self.dir)
            key = enc
        return cert, key

    def keystore_pem(self, name: str, cn: str, *, server: bool = False, key_password: str | None = None) -> Path:
        """A Kafka PEM keystore file: private key followed by the certificate chain."""
        cert, key = self.issue(name, cn, server=server, key_password=key_password)
        path = self.dir / f"{name}.keystore.pem"
        path.write_text(key.read_text() + cert.read_text() + self.ca_cert.read_text())
        return path

    def keystore_p12(self, name: str, cn: str, password: str, *, server: bool = False) -> Path:
        """A PKCS12 keystore (key + certificate + CA), as keytool or openssl make them."""
        cert, key = self.issue(name, cn, server=server)
        path = self.dir / f"{name}.keystore.p12"
        _run("pkcs12", "-export", "-in", cert.name, "-inkey", key.name, "-certfile", self.ca_cert.name,
             "-name", name, "-out", path.name, "-passout", f"pass:{password}", cwd=self.dir)
        return path

    def truststore_p12(self, password: str) -> Path:
        """A PKCS12 truststore holding only the CA certificate."""
        path = self.dir / "truststore.p12"
        _run("pkcs12", "-export", "-nokeys", "-in", self.ca_cert.name, "-out", path.name,
             "-passout", f"pass:{password}", cwd=self.dir)
        return path


    def keystore_jks(self, name: str, cn: str, store_password: str, key_password: str, *,
                     server: bool = False) -> Path:
        """A JKS keystore (key + certificate chain) made by the JDK's keytool from a PKCS12 one."""
        p12 = self.keystore_p12(name, cn, store_password, server=server)
        path = self.dir / f"{name}.keystore.jks"
        _keytool("-importkeystore", "-srckeystore", p12.name, "-srcstoretype", "PKCS12", "-srcstorepass",
                 store_password, "-destkeystore", path.name, "-deststoretype", "JKS", "-deststorepass",
                 store_password, "-destkeypass", key_password, "-noprompt", cwd=self.dir)
        return path

    def truststore_jks(self, password: str) -> Path:
        """A JKS truststore holding the CA certificate (keytool -importcert)."""
        path = self.dir / "truststore.jks"
        if not path.exists():
            _keytool("-importcert", "-noprompt", "-alias", "ca", "-file", self.ca_cert.name, "-storetype", "JKS",
                     "-keystore", path.name, "-storepass", password, cwd=self.dir)
        return path


def _keytool(*args: str, cwd: Path) -> None:
    subprocess.run(["keytool", *args], cwd=cwd, check=True, capture_output=True, timeout=120)


def make_ca(directory: Path) -> TestCA:
    directory.mkdir(parents=True, exist_ok=True)
    _run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca.key",
         "-out", "ca.crt", "-days", "2", "-subj", "/O=krafty-test/CN=krafty test CA", cwd=directory)
    return TestCA(directory, directory / "ca.crt", directory / "ca.key")
