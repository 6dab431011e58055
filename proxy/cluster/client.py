"""A small Kafka client for the proxy's own requests (broker discovery, cluster state)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import itertools
import random
import secrets
import ssl
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from kafka_policy_proxy.codec import oauthbearer_client
from kafka_policy_proxy.codec.header import request_header, response_header_size
from kafka_policy_proxy.codec.registry import decode_exact, encode, response_class
from kafka_policy_proxy.proxy.kafka_client.token_source import TokenSource, TokenUnavailable
from kafka_policy_proxy.proxy.metrics import SASL_REAUTHENTICATIONS
from kafka_policy_proxy.proxy.tls.broker_side import explain, not_tls

CLIENT_ID = "kafka-policy-proxy"

SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
SASL_MECHANISMS = ("PLAIN", *SCRAM_HASHES)


class SaslAuthenticationError(ConnectionError):
    """The broker refused the proxy's own SASL credentials, or the exchange went wrong."""


@dataclass(frozen=True, slots=True)
class SaslCredentials:
    """The proxy's own SASL credentials: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512."""

    mechanism: str
    username: str
    password: str = field(repr=False)

    def __post_init__(self) -> None:
        if self.mechanism not in SASL_MECHANISMS:
            raise ValueError(
                f"unsupported SASL mechanism {self.mechanism!r}; use one of {SASL_MECHANISMS}"
            )


# How the proxy logs in to the brokers: a password (PLAIN, SCRAM) or OAUTHBEARER tokens.
SaslLogin = SaslCredentials | TokenSource
# KIP-368: re-authenticate at 85-95% of the session lifetime the broker grants, as Kafka's
# clients do, so a session never expires under a request.
REAUTH_WINDOW = (0.85, 0.95)


class ScramClient:
    """The client side of one SCRAM exchange (RFC 5802), without channel binding."""

    def __init__(self, mechanism: str, username: str, password: str, nonce: str | None = None):
        self._hash = SCRAM_HASHES[mechanism]
        # Kafka does not SASLprep: the password is used as its UTF-8 bytes.
        self._password = password.encode()
        saslname = username.replace("=", "=3D").replace(",", "=2C")
        self._client_nonce = nonce or secrets.token_urlsafe(24)
        self._first_bare = f"n={saslname},r={self._client_nonce}"
        self._auth_message = b""
        self._server_key = b""

    def first_message(self) -> bytes:
        """The client-first message (GS2 header: no channel binding, no authzid)."""
        return f"n,,{self._first_bare}".encode()

    def final_message(self, server_first: bytes) -> bytes:
        """The client-final message with the proof, for the server-first message."""
        attrs = _scram_attributes(server_first)
        nonce = attrs.get("r", "")
        if not nonce.startswith(self._client_nonce) or nonce == self._client_nonce:
            raise SaslAuthenticationError("SCRAM server nonce does not extend the client nonce")
        try:
            salt = base64.b64decode(attrs["s"], validate=True)
            iterations = int(attrs["i"])
        except (KeyError, ValueError) as exc:
            raise SaslAuthenticationError(f"malformed SCRAM server-first message: {exc}") from exc
        salted = hashlib.pbkdf2_hmac(self._hash, self._password, salt, iterations)
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        without_proof = f"c=biws,r={nonce}"
        self._auth_message = f"{self._first_bare},{server_first.decode()},{without_proof}".encode()
        signature = self._hmac(stored_key, self._auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_key = self._hmac(salted, b"Server Key")
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify_server_final(self, server_final: bytes) -> None:
        """Check the server's signature, which proves the server knows the password too."""
        attrs = _scram_attributes(server_final)
        if "e" in attrs:
            raise SaslAuthenticationError(f"SCRAM authentication failed: {attrs['e']}")
        expected = self._hmac(self._server_key, self._auth_message)
        if not hmac.compare_digest(base64.b64encode(expected).decode(), attrs.get("v", "")):
            raise SaslAuthenticationError("SCRAM server signature does not match")

    def _hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.new(key, message, self._hash).digest()


def _scram_attributes(message: bytes) -> dict[str, str]:
    try:
        text = message.decode()
    except UnicodeDecodeError as exc:
        raise SaslAuthenticationError("SCRAM server message is not UTF-8") from exc
    return {part[0]: part[2:] for part in text.split(",") if len(part) >= 2 and part[1] == "="}


class KafkaClient:
    """One connection to one broker; requests are sent one at a time, each within a deadline."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        deadline: float,
        address: tuple[str, int] = ("", 0),
        tls: bool = False,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._deadline = deadline
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()
        self._address = address
        self._tls = tls
        self._answered = False
        self._sasl: SaslLogin | None = None
        self._reauth_at: float | None = None  # loop time; None: the broker set no session limit
        self._session_expiry: float | None = None

    @classmethod
    async def connect(
        cls,
        host: str,
        port: int,
        deadline: float,
        sasl: SaslLogin | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> KafkaClient:
        """Connect to host:port (over TLS if `tls`), authenticate if `sasl`; each request gets
        `deadline` seconds."""
        try:
            async with asyncio.timeout(deadline):
                reader, writer = await asyncio.open_connection(
                    host, port, ssl=tls, server_hostname=host if tls else None
                )
        except ssl.SSLError as exc:
            raise explain(exc, host, port) from None
        except ConnectionResetError:
            if tls is None:
                raise
            raise not_tls(host, port) from None
        client = cls(reader, writer, deadline, (host, port), tls is not None)
        if sasl is not None:
            try:
                await client._authenticate(sasl)
            except BaseException:
                await client.close()
                raise
        return client

    @property
    def session_expired(self) -> bool:
        """The broker's session limit (KIP-368) has passed: it will close the connection."""
        expiry = self._session_expiry
        return expiry is not None and asyncio.get_running_loop().time() >= expiry

    async def request(self, message: Any) -> Any:
        """Send one kio request message and return the decoded response (re-authenticating
        first when the session nears the limit the broker set)."""
        async with self._lock:
            reauth_at = self._reauth_at
            if reauth_at is not None and asyncio.get_running_loop().time() >= reauth_at:
                assert self._sasl is not None
                try:
                    await self._authenticate(self._sasl)
                except BaseException:
                    SASL_REAUTHENTICATIONS.labels(result="error").inc()
                    raise
                SASL_REAUTHENTICATIONS.labels(result="ok").inc()
            return await self._exchange(message)

    async def _exchange(self, message: Any) -> Any:
        """One request and its response; the caller holds the lock."""
        key, version = int(message.__api_key__), int(message.__version__)
        async with asyncio.timeout(self._deadline):
            correlation_id = next(self._ids)
            body = request_header(key, version, correlation_id, CLIENT_ID) + encode(message)
            try:
                self._writer.write(len(body).to_bytes(4, "big") + body)
                await self._writer.drain()
                size = int.from_bytes(await self._reader.readexactly(4))
                frame = await self._reader.readexactly(size)
            except ssl.SSLError as exc:
                # TLS 1.3: a broker refuses a client certificate after the handshake.
                raise explain(exc, *self._address) from None
            except asyncio.IncompleteReadError:
                if self._answered:
                    raise
                hint = (
                    "if it requires client certificates, set upstream.tls.cert_file and key_file "
                    "(in client properties: ssl.keystore.*)"
                    if self._tls
                    else "if its listener is SSL or SASL_SSL, set upstream.tls (in client "
                    "properties: security.protocol=SSL or SASL_SSL)"
                )
                raise ConnectionError(
                    f"broker {self._address[0]}:{self._address[1]} closed the connection "
                    f"without answering: {hint}"
                ) from None
            self._answered = True
        if int.from_bytes(frame[:4], "big", signed=True) != correlation_id:
            raise ConnectionError("response correlation id does not match the request")
        start = response_header_size(frame, key, version)
        return decode_exact(response_class(key, version), frame, start)

    async def close(self) -> None:
        """Close the connection."""
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()

    async def _authenticate(self, sasl: SaslLogin) -> None:
        self._sasl = sasl
        handshake = await self._exchange(SaslHandshakeRequest(mechanism=sasl.mechanism))
        if handshake.error_code is not ErrorCode.none:
            raise SaslAuthenticationError(
                f"broker refused SASL mechanism {sasl.mechanism} ({handshake.error_code.name}); "
                f"it offers {', '.join(handshake.mechanisms) or 'none'}"
            )
        if isinstance(sasl, TokenSource):
            await self._oauthbearer(sasl)
        elif sasl.mechanism == "PLAIN":
            await self._sasl_step(f"\0{sasl.username}\0{sasl.password}".encode())
        else:
            scram = ScramClient(sasl.mechanism, sasl.username, sasl.password)
            server_first = await self._sasl_step(scram.first_message())
            server_final = await self._sasl_step(scram.final_message(server_first))
            scram.verify_server_final(server_final)

    async def _oauthbearer(self, tokens: TokenSource) -> None:
        try:
            token = await tokens.token()
        except TokenUnavailable as exc:
            raise SaslAuthenticationError(str(exc)) from None
        message = oauthbearer_client.initial_response(token, tokens.settings.extensions)
        challenge = await self._sasl_step(message)
        if challenge:
            # RFC 7628 3.2.3: acknowledge the error challenge; the broker then fails the exchange.
            reason = oauthbearer_client.error_status(challenge)
            with contextlib.suppress(SaslAuthenticationError):
                await self._sasl_step(oauthbearer_client.ERROR_ACKNOWLEDGEMENT)
            raise SaslAuthenticationError(f"SASL authentication failed: the broker says {reason}")

    async def _sasl_step(self, auth_bytes: bytes) -> bytes:
        response = await self._exchange(SaslAuthenticateRequest(auth_bytes=auth_bytes))
        if response.error_code is not ErrorCode.none:
            detail = response.error_message or response.error_code.name
            raise SaslAuthenticationError(f"SASL authentication failed: {detail}")
        lifetime = response.session_lifetime.total_seconds()
        if lifetime > 0:
            now = asyncio.get_running_loop().time()
            self._reauth_at = now + lifetime * random.uniform(*REAUTH_WINDOW)
            self._session_expiry = now + lifetime
        return bytes(response.auth_bytes)
