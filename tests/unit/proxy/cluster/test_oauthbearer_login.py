"""The proxy's own connection logs in with OAUTHBEARER and re-authenticates (KIP-368) before
the session the broker granted runs out; a refused token fails with the broker's reason."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse
from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse

from kafka_policy_proxy.codec.header import peek_request_header, request_body_offset
from kafka_policy_proxy.codec.registry import decode_exact, encode, request_class
from kafka_policy_proxy.proxy.cluster.client import (
    KafkaClient,
    SaslAuthenticationError,
    SaslCredentials,
)
from kafka_policy_proxy.proxy.cluster.connection import ClusterConnection
from kafka_policy_proxy.proxy.cluster.requests import metadata_request
from kafka_policy_proxy.proxy.kafka_client.oauth import OAuthSettings
from kafka_policy_proxy.proxy.kafka_client.token_source import Token, TokenSource
from kafka_policy_proxy.proxy.metrics import SASL_REAUTHENTICATIONS
from tests.unit.proxy.cluster.fake_broker import FakeBroker, metadata

SETTINGS = OAuthSettings("http://idp/token", "proxy", "secret", None, {"logicalCluster": "lkc"})


def tokens() -> TokenSource:
    issued = iter(range(1, 100))

    async def fetch(settings: OAuthSettings, timeout_s: float) -> Token:
        return Token(f"tok{next(issued)}", 0.0, 4e9)  # refresh due at 80%: far in the future

    return TokenSource(SETTINGS, fetch=fetch)


def script(lifetime_ms: int = 0, challenge: bytes = b"") -> object:
    def answer(key: int) -> bytes:
        if key == 17:
            return encode(
                SaslHandshakeResponse(error_code=ErrorCode.none, mechanisms=("OAUTHBEARER",))
            )
        if key == 36:
            refused = challenge and answer.steps % 2  # type: ignore[attr-defined]
            answer.steps += 1  # type: ignore[attr-defined]
            return encode(
                SaslAuthenticateResponse(
                    error_code=ErrorCode.sasl_authentication_failed if refused else ErrorCode.none,
                    error_message="Authentication failed" if refused else None,
                    auth_bytes=b"" if refused else challenge,
                    session_lifetime=timedelta(milliseconds=lifetime_ms),
                )
            )
        return encode(metadata())

    answer.steps = 0  # type: ignore[attr-defined]
    return answer


def auth_bytes(broker: FakeBroker) -> list[bytes]:
    """The auth_bytes of every SaslAuthenticate the broker received."""
    found = []
    for frame in broker.frames:
        header = peek_request_header(frame)
        if header.api_key == 36:
            cls = request_class(36, header.api_version)
            found.append(decode_exact(cls, frame, request_body_offset(frame, header)).auth_bytes)
    return found


async def test_the_login_sends_the_token_and_extensions() -> None:
    broker = FakeBroker(script())  # type: ignore[arg-type]
    await broker.start()
    client = await KafkaClient.connect(*broker.address, 5.0, tokens())
    await client.request(metadata_request(()))
    await client.close()
    assert broker.requests == [17, 36, 3]
    assert auth_bytes(broker) == [b"n,,\x01auth=Bearer tok1\x01logicalCluster=lkc\x01\x01"]


async def test_a_refused_token_is_acknowledged_and_fails_with_the_brokers_reason() -> None:
    broker = FakeBroker(script(challenge=b'{"status":"invalid_token"}'))  # type: ignore[arg-type]
    await broker.start()
    with pytest.raises(SaslAuthenticationError, match="invalid_token"):
        await KafkaClient.connect(*broker.address, 5.0, tokens())
    assert auth_bytes(broker)[1] == b"\x01"  # RFC 7628: the client ends the failed exchange


async def test_the_session_is_renewed_on_the_same_connection_before_it_expires() -> None:
    broker = FakeBroker(script(lifetime_ms=200))  # type: ignore[arg-type]
    await broker.start()
    before = SASL_REAUTHENTICATIONS.labels(result="ok")._value.get()
    client = await KafkaClient.connect(*broker.address, 5.0, tokens())
    await client.request(metadata_request(()))
    await asyncio.sleep(0.195)  # past 95% of the session: the next request renews it first
    await client.request(metadata_request(()))
    await client.close()
    assert broker.connections == 1
    assert broker.requests == [17, 36, 3, 17, 36, 3]
    assert SASL_REAUTHENTICATIONS.labels(result="ok")._value.get() == before + 1


async def test_a_connection_idle_past_its_session_is_replaced_not_used() -> None:
    broker = FakeBroker(script(lifetime_ms=50))  # type: ignore[arg-type]
    await broker.start()
    connection = ClusterConnection([broker.address], sasl=tokens())
    first = await connection.connected()
    await asyncio.sleep(0.06)  # the broker would close it on the next request
    second = await connection.connected()
    assert second is not first
    assert broker.connections == 2
    await connection.close()


async def test_a_password_session_is_renewed_the_same_way() -> None:
    broker = FakeBroker(script(lifetime_ms=200))  # type: ignore[arg-type]
    await broker.start()
    client = await KafkaClient.connect(
        *broker.address, 5.0, SaslCredentials("PLAIN", "admin", "admin-secret")
    )
    await asyncio.sleep(0.195)
    await client.request(metadata_request(()))
    await client.close()
    assert broker.connections == 1
    assert auth_bytes(broker) == [b"\0admin\0admin-secret"] * 2
