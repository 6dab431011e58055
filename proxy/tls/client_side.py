"""TLS on the client side: the server context, and the principal a client certificate names."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from kafka_policy_proxy.proxy.config import ConfigError, TlsConfig
from kafka_policy_proxy.proxy.identity.tls import (
    NoMatchingRuleError,
    parse_mapping_rules,
    subject_dn,
)

_VERIFY_MODES = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}


class TlsError(ConfigError):
    """The TLS settings cannot be used; the message names the key and the file."""


class CertificatePrincipalError(Exception):
    """A verified client certificate names no principal; the connection must be closed."""


def _fail(key: str, path: Path, reason: str) -> NoReturn:
    raise TlsError(f"listeners.tls.{key}: {path}: {reason}")


def _check_readable(key: str, path: Path) -> None:
    try:
        path.read_bytes()
    except OSError as exc:
        _fail(key, path, f"cannot read: {exc.strerror}")


class _EncryptedKey(Exception):
    """The key file wants a password, which the config has no setting for."""


def _no_password() -> str:
    raise _EncryptedKey


def server_context(tls: TlsConfig) -> ssl.SSLContext:
    """Build the listeners' TLS context (TLS 1.2+); raise TlsError naming any unusable file."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _check_readable("cert_file", tls.cert_file)
    _check_readable("key_file", tls.key_file)
    try:
        # Parsed on its own first, so that a failure of the pair below is the key's.
        ssl.create_default_context().load_verify_locations(cadata=tls.cert_file.read_text())
    except (ssl.SSLError, UnicodeDecodeError, ValueError):  # ValueError: an empty file
        _fail("cert_file", tls.cert_file, "no PEM certificate found")
    try:
        # No password setting exists; without a callback OpenSSL would prompt on the terminal.
        context.load_cert_chain(tls.cert_file, tls.key_file, password=_no_password)
    except _EncryptedKey:
        _fail("key_file", tls.key_file, "the private key is encrypted; give it unencrypted")
    except ssl.SSLError as exc:
        _fail(
            "key_file",
            tls.key_file,
            f"not a PEM private key matching the certificate in {tls.cert_file} ({exc})",
        )
    if tls.ca_file is not None:
        _check_readable("ca_file", tls.ca_file)
        try:
            context.load_verify_locations(cafile=tls.ca_file)
        except ssl.SSLError:
            _fail("ca_file", tls.ca_file, "no PEM CA certificate found")
    elif tls.client_auth != "none":
        raise TlsError(
            "listeners.tls.ca_file: needed to verify client certificates "
            f"(client_auth is {tls.client_auth!r})"
        )
    context.verify_mode = _VERIFY_MODES[tls.client_auth]
    return context


class CertificatePrincipals:
    """Names the principal of a TLS connection from its client certificate's subject."""

    def __init__(self, rules: Sequence[str]) -> None:
        """Parse Kafka-style mapping rules; raise MappingRuleError on a bad one."""
        self._mapper = parse_mapping_rules(list(rules))

    def principal(self, transport: asyncio.BaseTransport) -> str | None:
        """Return 'User:<mapped DN>' if the client presented a certificate, else None."""
        # "ssl_object" is there on both asyncio's and uvloop's TLS transports, after the
        # handshake; a certificate it reports has been verified against ca_file.
        ssl_object = transport.get_extra_info("ssl_object")
        cert = None if ssl_object is None else ssl_object.getpeercert()
        if not cert:
            return None
        try:
            dn = subject_dn(cert["subject"])
        except ValueError as exc:
            raise CertificatePrincipalError(f"client certificate subject: {exc}") from exc
        try:
            return self._mapper.principal(dn)
        except NoMatchingRuleError as exc:
            raise CertificatePrincipalError(
                f"client certificate {dn!r}: no principal mapping rule applies "
                "(end listeners.tls.principal_mapping_rules with DEFAULT to use the whole DN)"
            ) from exc
