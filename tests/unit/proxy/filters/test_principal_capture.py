"""SASL principal capture: the principal comes back as data once the broker has agreed.

A gated request before authentication closes the connection and is audited, with no principal.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate import v2 as auth_v2
from kio.schema.sasl_handshake import v1 as handshake_v1
from structlog.testing import capture_logs

from kafka_policy_proxy.codec.errors import CodecError
from kafka_policy_proxy.codec.registry import encode
from kafka_policy_proxy.policy.decision_log import DecisionRecord
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.proxy.filters.api import Close, Forward, RequestContext, WithPrincipal
from kafka_policy_proxy.proxy.filters.principal_capture import PrincipalCaptureFilter
from tests.unit.proxy.contexts import context, settle
from tests.unit.proxy.enforcement_fakes import Records, create_topics

POLICY = load_policy("version: 1\nrules: [{name: bounds, partitions: {max: 100}}]\n")


@pytest.fixture
def records(tmp_path: Path) -> Records:
    return Records(tmp_path)


@pytest.fixture
def capture(records: Records) -> PrincipalCaptureFilter:
    return PrincipalCaptureFilter(lambda: POLICY, records.recorder)


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


async def test_a_successful_plain_exchange_hands_back_the_principal(
    capture: PrincipalCaptureFilter,
) -> None:
    assert isinstance(handshake(capture, 1), bytes)
    result = await authenticate(capture, 1, "alice")
    assert isinstance(result, WithPrincipal)
    assert result.principal == "User:alice"


async def test_a_refused_exchange_hands_back_no_principal(capture: PrincipalCaptureFilter) -> None:
    handshake(capture, 1)
    result = await authenticate(capture, 1, "alice", ErrorCode.sasl_authentication_failed)
    assert isinstance(result, bytes)


async def test_connections_are_tracked_apart(capture: PrincipalCaptureFilter) -> None:
    handshake(capture, 1)
    handshake(capture, 2)
    bob = await authenticate(capture, 2, "bob")
    alice = await authenticate(capture, 1, "alice")
    assert isinstance(alice, WithPrincipal) and alice.principal == "User:alice"
    assert isinstance(bob, WithPrincipal) and bob.principal == "User:bob"


async def test_a_closed_connection_is_forgotten(capture: PrincipalCaptureFilter) -> None:
    handshake(capture, 1)
    capture.on_close(1)
    # The handshake went with the connection: an authenticate on a reused id is out of order.
    with pytest.raises(CodecError, match="SASL"):
        await authenticate(capture, 1, "alice")


def test_a_sasl_message_out_of_order_is_refused(capture: PrincipalCaptureFilter) -> None:
    request = auth_v2.SaslAuthenticateRequest(auth_bytes=b"\0alice\0secret")
    with pytest.raises(CodecError, match="SASL"):
        capture.on_request(context(36, 2, request))


def create_topic(conn: int, listener: str = "bootstrap") -> RequestContext:
    ctx = context(19, 7, create_topics(("orders.v1", 1)), connection_id=conn)
    return replace(ctx, listener=listener)


def test_a_guarded_request_mid_exchange_closes_the_connection_and_is_audited(
    capture: PrincipalCaptureFilter, records: Records
) -> None:
    capture.on_request(
        context(17, 1, handshake_v1.SaslHandshakeRequest(mechanism="PLAIN"), connection_id=1)
    )
    with capture_logs() as logs:
        verdict = capture.on_request(create_topic(1))
    assert isinstance(verdict, Close)
    assert verdict.reason == "sent before SASL authentication completed"
    assert verdict.detail == "CreateTopics while the SASL exchange is HANDSHAKE_SENT"
    [record] = records.read()
    DecisionRecord.model_validate(record)
    [line] = logs  # the warning names the record's id
    assert line["decision_id"] == record["decision_id"]
    assert {k: record[k] for k in ("principal", "decision", "api", "resource", "conn")} == {
        "principal": "",
        "decision": "denied",
        "api": "CreateTopics",
        "resource": "CreateTopics",
        "conn": 1,
    }
    assert (record["policy_revision"], record["client_id"]) == (POLICY.revision, "t")
    assert [v["rule"] for v in record["violations"]] == ["authentication-order"]
    assert record["request"] == {
        "refused": "authentication-order",
        "api": "CreateTopics",
        "listener": "bootstrap",
        "sasl_state": "HANDSHAKE_SENT",
    }


def test_without_a_policy_file_the_refusal_is_audited_with_no_revision(records: Records) -> None:
    capture = PrincipalCaptureFilter(lambda: None, records.recorder)
    handshake(capture, 1)
    assert isinstance(capture.on_request(create_topic(1)), Close)
    [record] = records.read()
    assert (record["policy_revision"], record["decision"]) == ("", "denied")


async def test_a_guarded_request_after_a_failed_exchange_closes_the_connection(
    capture: PrincipalCaptureFilter,
) -> None:
    handshake(capture, 1)
    await authenticate(capture, 1, "alice", ErrorCode.sasl_authentication_failed)
    assert isinstance(capture.on_request(create_topic(1)), Close)


async def test_after_authentication_guarded_requests_go_on(
    capture: PrincipalCaptureFilter, records: Records
) -> None:
    handshake(capture, 1)
    await authenticate(capture, 1, "alice")
    assert capture.on_request(create_topic(1)) == Forward()
    assert records.read() == []  # the policy filters judge and record it, as alice


def test_a_listener_that_accepted_sasl_refuses_connections_that_never_authenticated(
    capture: PrincipalCaptureFilter, records: Records
) -> None:
    assert capture.on_request(create_topic(2)) == Forward()
    handshake(capture, 1)
    verdict = capture.on_request(create_topic(2))
    assert isinstance(verdict, Close)
    assert verdict.detail == "CreateTopics while the SASL exchange is never started"
    # Another listener has shown no SASL: its clients are not refused.
    assert capture.on_request(create_topic(3, listener="broker-1")) == Forward()
    metadata = replace(context(3, 12, connection_id=2), listener="bootstrap")
    assert isinstance(capture.on_request(metadata), Close)
    refused = [(r["api"], r["principal"], r["request"]["sasl_state"]) for r in records.read()]
    assert refused == [("CreateTopics", "", "never started"), ("Metadata", "", "never started")]
