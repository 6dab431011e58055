"""Throwaway TLS certificates made with the openssl CLI: a CA, a server and some clients.

Import `tls_certs_fixture` (with `# noqa: F401`) into a test module and ask for `tls_certs`.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

# Client name -> subject, in openssl's order (the root-most RDN first).
CLIENTS = {
    "alice": "/O=Acme/OU=eng/CN=alice",  # CN=alice,OU=eng,O=Acme
    "bob": "/CN=bob",
}


@dataclass(frozen=True)
class TlsCerts:
    """Paths to PEM files: `ca`, the server's pair, and `cert(name)` / `key(name)` per client."""

    directory: Path
    ca: Path
    server_cert: Path
    server_key: Path

    def cert(self, name: str) -> Path:
        """The certificate of a client from CLIENTS, or of "stranger" (from another CA)."""
        return self.directory / f"{name}.pem"

    def key(self, name: str) -> Path:
        """The unencrypted private key of a client."""
        return self.directory / f"{name}.key"


def _openssl(directory: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)


def _self_signed(directory: Path, name: str, subject: str) -> None:
    _openssl(
        directory,
        *("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-noenc"),
        *("-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", subject),
        *("-addext", "basicConstraints=critical,CA:TRUE"),
        *("-addext", "keyUsage=critical,keyCertSign,cRLSign"),
    )


def _signed(directory: Path, name: str, subject: str, extensions: str) -> None:
    (directory / f"{name}.ext").write_text(extensions)
    _openssl(
        directory,
        *("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-noenc"),
        *("-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject),
    )
    _openssl(
        directory,
        *("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key"),
        *("-CAcreateserial", "-days", "2", "-out", f"{name}.pem", "-extfile", f"{name}.ext"),
    )


def make_certs(directory: Path) -> TlsCerts:
    """Write a CA, a server certificate for 127.0.0.1/localhost and the client certificates."""
    _self_signed(directory, "ca", "/CN=kafka-policy-proxy test CA")
    _signed(
        directory,
        "server",
        "/CN=localhost",
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
    )
    for name, subject in CLIENTS.items():
        _signed(directory, name, subject, "extendedKeyUsage=clientAuth\n")
    # Signed by nobody the proxy trusts.
    _self_signed(directory, "stranger", "/CN=stranger")
    return TlsCerts(
        directory, directory / "ca.pem", directory / "server.pem", directory / "server.key"
    )


@pytest.fixture(scope="session", name="tls_certs")
def tls_certs_fixture(tmp_path_factory: pytest.TempPathFactory) -> TlsCerts:
    """The certificates, made once per test session."""
    return make_certs(tmp_path_factory.mktemp("tls"))
