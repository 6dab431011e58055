"""TLS to the brokers: the client context, checked at start, and handshake failures explained."""

from __future__ import annotations

import datetime
import ssl
from pathlib import Path
from typing import NoReturn

from cryptography import x509

from kafka_policy_proxy.proxy.config import ConfigError, UpstreamTlsConfig

# OpenSSL's X509_V_ERR_* codes that a broker certificate check reports.
_UNTRUSTED = {2, 7, 18, 19, 20, 21}  # no issuer, bad signature, self-signed, unverifiable
_EXPIRED, _NOT_YET_VALID, _HOSTNAME_MISMATCH, _IP_MISMATCH = 10, 9, 62, 64
# Alerts a broker sends when it does not accept the proxy's client certificate.
_CLIENT_CERT_ALERTS = (
    "CERTIFICATE_REQUIRED",
    "BAD_CERTIFICATE",
    "UNKNOWN_CA",
    "CERTIFICATE_UNKNOWN",
    "CERTIFICATE_EXPIRED",
    "HANDSHAKE_FAILURE",
)
# What a handshake with a plaintext listener ends in (Kafka closes on the "oversized" frame).
_NOT_TLS = ("WRONG_VERSION_NUMBER", "PACKET_LENGTH_TOO_LONG", "RECORD_LAYER_FAILURE", "EOF")


class UpstreamTlsError(ConfigError):
    """The upstream TLS settings cannot be used; the message names the key and the file."""


class BrokerTlsError(ConnectionError):
    """A TLS handshake with a broker failed; the message names the setting to look at."""


def _fail(key: str, path: Path, reason: str) -> NoReturn:
    raise UpstreamTlsError(f"upstream.tls.{key}: {path}: {reason}")


def _read(key: str, path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        _fail(key, path, f"cannot read: {exc.strerror}")


def _check_dates(path: Path, now: datetime.datetime) -> None:
    try:
        cert = x509.load_pem_x509_certificate(_read("cert_file", path))
    except ValueError:
        _fail("cert_file", path, "no PEM certificate found")
    if now > cert.not_valid_after_utc:
        _fail("cert_file", path, f"the certificate expired on {cert.not_valid_after_utc:%Y-%m-%d}")
    if now < cert.not_valid_before_utc:
        when = f"{cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC"
        _fail("cert_file", path, f"the certificate is not valid before {when}")


def client_context(tls: UpstreamTlsConfig, now: datetime.datetime | None = None) -> ssl.SSLContext:
    """Build the context for connections to the brokers; raise naming any unusable setting."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the broker's certificate
    context.minimum_version = ssl.TLSVersion[tls.min_version.replace(".", "_")]
    if tls.ca_file is None:
        context.load_default_certs()
    else:
        _read("ca_file", tls.ca_file)
        try:
            context.load_verify_locations(cafile=tls.ca_file)
        except (ssl.SSLError, ValueError):  # ValueError: an empty file
            _fail("ca_file", tls.ca_file, "no PEM CA certificate found")
    context.check_hostname = tls.check_hostname
    if tls.cert_file is not None and tls.key_file is not None:
        _check_dates(tls.cert_file, now or datetime.datetime.now(datetime.UTC))
        _read("key_file", tls.key_file)
        password = tls.key_password.get_secret_value() if tls.key_password else ""
        try:
            # An empty password, never None: OpenSSL would prompt on the terminal for one.
            context.load_cert_chain(tls.cert_file, tls.key_file, password=password)
        except ssl.SSLError as exc:
            _fail(
                "key_file",
                tls.key_file,
                f"not a PEM private key for the certificate in {tls.cert_file}, or "
                f"upstream.tls.key_password does not open it ({exc.reason or exc})",
            )
    return context


def explain(exc: ssl.SSLError, host: str, port: int) -> BrokerTlsError:
    """The handshake failure with host:port, as a message that names the setting to change."""
    where = f"TLS to broker {host}:{port}"
    if isinstance(exc, ssl.SSLCertVerificationError):
        code = exc.verify_code
        if code in _UNTRUSTED:
            why = (
                "its certificate is not signed by a CA in upstream.tls.ca_file "
                "(or the system's CAs when ca_file is unset; in client properties: "
                "ssl.truststore.*)"
            )
        elif code == _EXPIRED:
            why = "its certificate has expired (renew the broker certificate)"
        elif code == _NOT_YET_VALID:
            why = "its certificate is not valid yet (check the clocks)"
        elif code in (_HOSTNAME_MISMATCH, _IP_MISMATCH):
            why = (
                f"its certificate does not name {host!r}: dial a name it has in "
                "upstream.bootstrap_servers, or set upstream.tls.check_hostname: false (in "
                "client properties: ssl.endpoint.identification.algorithm=)"
            )
        else:
            why = f"its certificate was refused: {exc.verify_message}"
        return BrokerTlsError(f"{where}: {why}")
    reason = exc.reason or ("EOF" if isinstance(exc, ssl.SSLEOFError) else "")
    if any(alert in reason for alert in _CLIENT_CERT_ALERTS):
        why = (
            f"the broker refused the proxy's client certificate ({reason}): set "
            "upstream.tls.cert_file and key_file to one signed by a CA the broker trusts (in "
            "client properties: ssl.keystore.*)"
        )
    elif any(marker in reason for marker in _NOT_TLS):
        return not_tls(host, port)
    else:
        why = f"handshake failed ({reason or exc}); check upstream.tls (or ssl.* client properties)"
    return BrokerTlsError(f"{where}: {why}")


def not_tls(host: str, port: int) -> BrokerTlsError:
    """The broker broke off the TLS handshake, as a plaintext listener does."""
    return BrokerTlsError(
        f"TLS to broker {host}:{port}: the broker did not answer in TLS: is this a PLAINTEXT or "
        "SASL_PLAINTEXT listener? Remove upstream.tls or dial the SSL listener (in client "
        "properties: security.protocol=PLAINTEXT or SASL_PLAINTEXT)"
    )
