"""A throwaway CA and the certificates a local TLS cluster needs, as PEM files.

By default a server certificate names only the IP address 127.0.0.1, so a client that dials
`localhost` sees a hostname mismatch, as it would with a wrongly named production broker.

As a command (docker-compose.tls.yml runs it),
`python -m harness.throwaway_ca DIR [--dns NAME ...]` writes ca.pem, a broker certificate for
the names with its Kafka PEM keystore, and a client certificate `proxy` for mTLS, into DIR.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

HOST_IP = "127.0.0.1"
_DAY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class Issued:
    """A certificate and its unencrypted PKCS#8 key, each in a PEM file."""

    cert: Path
    key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kafka-policy-proxy dev"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _key_pem(key: ec.EllipticCurvePrivateKey, password: str | None = None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode())
        if password
        else serialization.NoEncryption()
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )


class ThrowawayCa:
    """A self-signed CA in `directory` that issues server and client certificates."""

    def __init__(self, directory: Path, name: str = "ca") -> None:
        """Create the CA's key and certificate (`<name>.pem`) in `directory`."""
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self._subject = _name(f"throwaway {name}")
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(self._subject)
            .issuer_name(self._subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY)
            .not_valid_after(now + 365 * _DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )
        self.cert = directory / f"{name}.pem"
        self.cert.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def issue(
        self,
        name: str,
        *,
        server: bool,
        expired: bool = False,
        key_password: str | None = None,
        dns: Sequence[str] = (),
    ) -> Issued:
        """Issue `<name>.pem` and `<name>.key`: a server certificate for 127.0.0.1, or a client
        certificate with subject CN=<name>; `dns` adds host names to a server certificate."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        start, end = (now - 30 * _DAY, now - _DAY) if expired else (now - _DAY, now + 365 * _DAY)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(self._subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if server:
            names: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(HOST_IP))]
            names += [x509.DNSName(name) for name in dns]
            san = x509.SubjectAlternativeName(names)
            builder = builder.add_extension(san, critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        issued = Issued(self.directory / f"{name}.pem", self.directory / f"{name}.key")
        issued.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        issued.key.write_bytes(_key_pem(key, key_password))
        issued.key.chmod(0o600)
        return issued

    def keystore(self, issued: Issued) -> Path:
        """A PEM keystore for Kafka (`ssl.keystore.type=PEM`): the key, then the chain."""
        path = issued.cert.with_suffix(".keystore.pem")
        path.write_bytes(
            issued.key.read_bytes() + issued.cert.read_bytes() + self.cert.read_bytes()
        )
        path.chmod(0o600)
        return path


def main(argv: Sequence[str] | None = None) -> None:
    """Write a CA, a broker certificate (with keystore) and a client certificate into DIR."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("directory", type=Path)
    parser.add_argument("--dns", action="append", default=[], help="a broker host name")
    args = parser.parse_args(argv)
    ca = ThrowawayCa(args.directory)
    ca.keystore(ca.issue("broker", server=True, dns=args.dns))
    ca.issue("proxy", server=False)
    for path in args.directory.iterdir():
        path.chmod(0o644)  # read by the brokers' and the proxy's own users (throwaway keys)


if __name__ == "__main__":
    main()
