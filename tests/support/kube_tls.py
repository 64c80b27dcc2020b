"""A throw-away PKI for an emulated cluster served over https, as real API servers are.

A CA, a server certificate for 127.0.0.1 and a client certificate (CN ``servo``), made with the
``openssl`` command (Debian's openssl package) so no Python crypto dependency is needed. The
server verifies a client certificate when one is presented (the real server's
VerifyClientCertIfGiven) and accepts the bearer token otherwise.
"""

from __future__ import annotations

import base64
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

OPENSSL_TIMEOUT = 30.0
"""Seconds one openssl command may take."""
VALID_DAYS = "2"
CLIENT_NAME = "servo"


@dataclass(frozen=True)
class Pki:
    """Paths of the PEM files."""

    ca_cert: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path

    @staticmethod
    def data(path: Path) -> str:
        """A PEM file as kubeconfig ``*-data`` fields hold it (base64)."""
        return base64.b64encode(path.read_bytes()).decode()

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.server_cert, self.server_key)
        context.load_verify_locations(self.ca_cert)
        context.verify_mode = ssl.CERT_OPTIONAL
        return context


def _openssl(*args: str) -> None:
    done = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=OPENSSL_TIMEOUT)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {done.stderr.strip()}")


def _key(path: Path) -> None:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-out", str(path))


def _signed(
    directory: Path, name: str, subject: str, extensions: str, ca: Path, ca_key: Path
) -> tuple[Path, Path]:
    key, csr, cert, ext = (
        directory / f"{name}.key",
        directory / f"{name}.csr",
        directory / f"{name}.crt",
        directory / f"{name}.ext",
    )
    _key(key)
    _openssl("req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr))
    ext.write_text(extensions)
    _openssl(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(ca),
        "-CAkey",
        str(ca_key),
        "-CAcreateserial",
        "-days",
        VALID_DAYS,
        "-extfile",
        str(ext),
        "-out",
        str(cert),
    )
    return cert, key


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = directory / "ca.key", directory / "ca.crt"
    _key(ca_key)
    _openssl(
        "req",
        "-x509",
        "-new",
        "-key",
        str(ca_key),
        "-subj",
        "/CN=emulated-cluster-ca",
        "-days",
        VALID_DAYS,
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
        "-out",
        str(ca_cert),
    )
    server_cert, server_key = _signed(
        directory,
        "server",
        "/CN=kube-apiserver",
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature\n",
        ca_cert,
        ca_key,
    )
    client_cert, client_key = _signed(
        directory,
        "client",
        f"/O=emulated/CN={CLIENT_NAME}",
        "extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature\n",
        ca_cert,
        ca_key,
    )
    return Pki(ca_cert, server_cert, server_key, client_cert, client_key)
