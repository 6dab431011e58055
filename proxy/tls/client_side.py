"""TLS on the client side: the server context, the TLS layer of each client connection, and
the principal a client certificate names.

The loops' own TLS layers (asyncio's and uvloop's) close the socket as soon as a handshake
fails, before the alert OpenSSL has just written is sent: a client without the certificate
`client_auth: required` asks for saw the connection end, not `certificate_required` or
`bad_certificate`, and Kafka's Java client retried forever. So each listener terminates TLS in
asyncio's TLS protocol, which here sends the alert first and logs the failure with the client's
address.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from asyncio.sslproto import SSLProtocol
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import structlog

from kafka_policy_proxy.proxy.config import ConfigError, TlsConfig
from kafka_policy_proxy.proxy.identity.tls import (
    NoMatchingRuleError,
    parse_mapping_rules,
    subject_dn,
)

log = structlog.get_logger("proxy.tls")

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


class _ClientTls(SSLProtocol):
    """asyncio's server-side TLS layer, sending the alert of a failed handshake and logging it."""

    def _on_handshake_complete(
        self, handshake_exc: BaseException | type[BaseException] | None
    ) -> None:
        transport = self._transport
        if handshake_exc is not None and transport is not None:
            peer = transport.get_extra_info("peername")
            client = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
            if isinstance(handshake_exc, ssl.SSLError):
                log.warning(
                    "client TLS handshake refused", client=client, reason=_why(handshake_exc)
                )
            else:  # the client went away first (a plain-TCP probe, a timeout)
                log.info(
                    "client TLS handshake not completed", client=client, reason=_gone(handshake_exc)
                )
            with contextlib.suppress(Exception):
                # The alert, before the stock code closes the socket (3.11+; not in typeshed).
                self._process_outgoing()  # type: ignore[attr-defined]
        super()._on_handshake_complete(handshake_exc)  # type: ignore[arg-type]  # as asyncio passes it


def _gone(exc: BaseException | type[BaseException]) -> str:
    """Why the handshake ended early (asyncio passes an exception class for a client's EOF)."""
    return exc.__name__ if isinstance(exc, type) else str(exc) or type(exc).__name__


def _why(exc: ssl.SSLError) -> str:
    """OpenSSL's reason, with the verification message where there is one."""
    detail = getattr(exc, "verify_message", None)
    reason = exc.reason or str(exc)
    return f"{reason}: {detail}" if detail else reason


def tls_listener(
    factory: Callable[[], asyncio.BaseProtocol], context: ssl.SSLContext
) -> Callable[[], Any]:
    """The listener's protocol factory with TLS terminated in front of each connection: give
    it to `loop.create_server` without `ssl=`."""
    loop = asyncio.get_running_loop()
    # No waiter: nothing awaits the handshake; the app protocol hears of it (connection_made).
    return lambda: _ClientTls(loop, factory(), context, None, server_side=True)  # type: ignore[arg-type]
