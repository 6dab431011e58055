"""SASL principal capture: the principal comes back as data once the broker has agreed."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate import v2 as auth_v2
from kio.schema.sasl_handshake import v1 as handshake_v1

from codec.errors import CodecError
from codec.registry import encode
from proxy.filter import Close, Forward, RequestContext, WithPrincipal
from proxy.filters.principal_capture import PrincipalCaptureFilter
from tests.unit.proxy.contexts import context, settle
from tests.unit.proxy.enforcement_fakes import create_topics


def handshake(
    capture: PrincipalCaptureFilter, conn: int, error: ErrorCode = ErrorCode.none
) -> object:
    verdict = capture.on_request(
        context(17, 1, handshake_v1.SaslHandshakeRequest(mechanism="PLAIN"), connection_id=conn)
    )
    assert isinstance(verdict, Forward) and verdict.hook is not None
    response = handshake_v1.SaslHandshakeResponse(error_code=error, mechanisms=("PLAIN",))
    return verdict.hook(encode(response))


async def authenticate(
    capture: PrincipalCaptureFilter, conn: int, user: str, error: ErrorCode = ErrorCode.none
) -> object:
    request = auth_v2.SaslAuthenticateRequest(auth_bytes=f"\0{user}\0secret".encode())
    verdict = capture.on_request(context(36, 2, request, connection_id=conn))
    assert isinstance(verdict, Forward) and verdict.hook is not None
    response = auth_v2.SaslAuthenticateResponse(
        error_code=error,
        error_message=None,
        auth_bytes=b"",
        session_lifetime=timedelta(0),
    )
    return await settle(verdict.hook(encode(response)))


async def test_a_successful_plain_exchange_hands_back_the_principal() -> None:
    capture = PrincipalCaptureFilter()
    assert isinstance(handshake(capture, 1), bytes)
    result = await authenticate(capture, 1, "alice")
    assert isinstance(result, WithPrincipal)
    assert result.principal == "User:alice"


async def test_a_refused_exchange_hands_back_no_principal() -> None:
    capture = PrincipalCaptureFilter()
    handshake(capture, 1)
    result = await authenticate(capture, 1, "alice", ErrorCode.sasl_authentication_failed)
    assert isinstance(result, bytes)


async def test_connections_are_tracked_apart() -> None:
    capture = PrincipalCaptureFilter()
    handshake(capture, 1)
    handshake(capture, 2)
    bob = await authenticate(capture, 2, "bob")
    alice = await authenticate(capture, 1, "alice")
    assert isinstance(alice, WithPrincipal) and alice.principal == "User:alice"
    assert isinstance(bob, WithPrincipal) and bob.principal == "User:bob"


async def test_a_closed_connection_is_forgotten() -> None:
    capture = PrincipalCaptureFilter()
    handshake(capture, 1)
    capture.on_close(1)
    # The handshake went with the connection: an authenticate on a reused id is out of order.
    with pytest.raises(CodecError, match="SASL"):
        await authenticate(capture, 1, "alice")


def test_a_sasl_message_out_of_order_is_refused() -> None:
    capture = PrincipalCaptureFilter()
    request = auth_v2.SaslAuthenticateRequest(auth_bytes=b"\0alice\0secret")
    with pytest.raises(CodecError, match="SASL"):
        capture.on_request(context(36, 2, request))


def create_topic(conn: int, listener: str = "bootstrap") -> RequestContext:
    ctx = context(19, 7, create_topics(("orders.v1", 1)), connection_id=conn)
    return replace(ctx, listener=listener)


def test_a_guarded_request_mid_exchange_closes_the_connection() -> None:
    capture = PrincipalCaptureFilter()
    capture.on_request(
        context(17, 1, handshake_v1.SaslHandshakeRequest(mechanism="PLAIN"), connection_id=1)
    )
    verdict = capture.on_request(create_topic(1))
    assert isinstance(verdict, Close)
    assert verdict.reason == "sent before SASL authentication completed"
    assert verdict.detail == "CreateTopics while the SASL exchange is HANDSHAKE_SENT"


async def test_a_guarded_request_after_a_failed_exchange_closes_the_connection() -> None:
    capture = PrincipalCaptureFilter()
    handshake(capture, 1)
    await authenticate(capture, 1, "alice", ErrorCode.sasl_authentication_failed)
    assert isinstance(capture.on_request(create_topic(1)), Close)


async def test_after_authentication_guarded_requests_go_on() -> None:
    capture = PrincipalCaptureFilter()
    handshake(capture, 1)
    await authenticate(capture, 1, "alice")
    assert capture.on_request(create_topic(1)) == Forward()


def test_a_listener_that_accepted_sasl_refuses_connections_that_never_authenticated() -> None:
    capture = PrincipalCaptureFilter()
    assert capture.on_request(create_topic(2)) == Forward()
    handshake(capture, 1)
    verdict = capture.on_request(create_topic(2))
    assert isinstance(verdict, Close)
    assert verdict.detail == "CreateTopics while the SASL exchange is never started"
    # Another listener has shown no SASL: its clients are not refused.
    assert capture.on_request(create_topic(3, listener="broker-1")) == Forward()
    metadata = replace(context(3, 12, connection_id=2), listener="bootstrap")
    assert isinstance(capture.on_request(metadata), Close)
