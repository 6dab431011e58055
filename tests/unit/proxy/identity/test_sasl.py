"""The SASL principal tracker: a claimed name is trusted only after the broker agrees."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate import v0 as auth_v0
from kio.schema.sasl_authenticate import v1 as auth_v1
from kio.schema.sasl_authenticate import v2 as auth_v2
from kio.schema.sasl_handshake import v0 as handshake_v0
from kio.schema.sasl_handshake import v1 as handshake_v1

from kafka_policy_proxy.codec.header import peek_request_header, request_body_offset, request_header
from kafka_policy_proxy.codec.registry import decode_exact, encode, request_class, response_class
from kafka_policy_proxy.codec.sasl import SaslError, SaslParseError, scram_escape
from kafka_policy_proxy.proxy.identity.principal import ANONYMOUS
from kafka_policy_proxy.proxy.identity.sasl import (
    Authenticated,
    AuthenticationFailed,
    SaslPrincipalTracker,
    SaslStateError,
)
from tests.unit.codec.test_sasl import JAVA_PLAIN, JAVA_SCRAM_256, JAVA_USER, jws, oauth_first

OK, FAILED = ErrorCode.none, ErrorCode.sasl_authentication_failed
AUTH_VERSIONS = [auth_v0, auth_v1, auth_v2]


class Conversation:
    """Drive a tracker with kio messages of one SaslAuthenticate version."""

    def __init__(self, version: Any = auth_v2) -> None:
        self.tracker = SaslPrincipalTracker()
        self.v = version

    def handshake(self, mechanism: str, error: ErrorCode = OK) -> AuthenticationFailed | None:
        self.tracker.handshake_request(handshake_v1.SaslHandshakeRequest(mechanism=mechanism))
        return self.tracker.handshake_response(
            handshake_v1.SaslHandshakeResponse(error_code=error, mechanisms=(mechanism,))
        )

    def send(self, auth_bytes: bytes) -> None:
        self.tracker.authenticate_request(self.v.SaslAuthenticateRequest(auth_bytes=auth_bytes))

    def reply(
        self, error: ErrorCode = OK, auth_bytes: bytes = b"", message: str | None = None
    ) -> Authenticated | AuthenticationFailed | None:
        response = self.v.SaslAuthenticateResponse(
            error_code=error, error_message=message, auth_bytes=auth_bytes
        )
        return self.tracker.authenticate_response(response)

    def scram(self, user: str, final: bytes = b"v=c2lnbmF0dXJl") -> Any:
        assert self.handshake("SCRAM-SHA-256") is None
        self.send(f"n,,n={scram_escape(user)},r=cnonce".encode())
        assert self.reply(auth_bytes=b"r=cnoncesnonce,s=c2FsdA==,i=4096") is None
        self.send(b"c=biws,r=cnoncesnonce,p=cHJvb2Y=")
        return self.reply(auth_bytes=final)


# --- SASL: first authentication ---


def test_unauthenticated_connection_is_anonymous() -> None:
    tracker = SaslPrincipalTracker()
    assert tracker.principal == ANONYMOUS == "User:ANONYMOUS"
    assert not tracker.failed


@pytest.mark.parametrize("version", AUTH_VERSIONS, ids=["v0", "v1", "v2"])
def test_plain_principal_is_trusted_only_after_the_broker_succeeds(version: Any) -> None:
    talk = Conversation(version)
    assert talk.handshake("PLAIN") is None
    talk.send(JAVA_PLAIN)
    assert talk.tracker.principal == ANONYMOUS
    outcome = talk.reply()
    assert outcome == Authenticated(
        principal=f"User:{JAVA_USER}",
        mechanism="PLAIN",
        reauthentication=False,
        previous_principal=ANONYMOUS,
        principal_changed=False,
    )
    assert talk.tracker.principal == f"User:{JAVA_USER}"


def test_plain_failure_keeps_anonymous_and_reports_the_claim() -> None:
    talk = Conversation()
    talk.handshake("PLAIN")
    talk.send(JAVA_PLAIN)
    outcome = talk.reply(FAILED, message="Authentication failed: Invalid username or password")
    assert outcome == AuthenticationFailed(
        mechanism="PLAIN",
        error_code=58,
        error_message="Authentication failed: Invalid username or password",
        claimed_principal=f"User:{JAVA_USER}",
    )
    assert talk.tracker.principal == ANONYMOUS
    assert talk.tracker.failed
    with pytest.raises(SaslStateError, match="FAILED"):
        talk.handshake("PLAIN")


def test_handshake_refused_by_the_broker() -> None:
    talk = Conversation()
    outcome = talk.handshake("SCRAM-SHA-512", error=ErrorCode.unsupported_sasl_mechanism)
    assert outcome == AuthenticationFailed("SCRAM-SHA-512", 33, None, None)
    assert talk.tracker.failed
    assert talk.tracker.principal == ANONYMOUS


def test_scram_needs_both_rounds() -> None:
    talk = Conversation()
    talk.handshake("SCRAM-SHA-256")
    talk.send(JAVA_SCRAM_256)
    # server-first with error_code 0 is not success yet
    assert talk.reply(auth_bytes=b"r=x,s=c2FsdA==,i=4096") is None
    assert talk.tracker.principal == ANONYMOUS
    talk.send(b"c=biws,r=x,p=cHJvb2Y=")
    outcome = talk.reply(auth_bytes=b"v=c2lnbmF0dXJl")
    assert isinstance(outcome, Authenticated)
    assert outcome.principal == f"User:{JAVA_USER}"


def test_scram_wrong_password_fails_in_the_final_round() -> None:
    talk = Conversation()
    talk.handshake("SCRAM-SHA-256")
    talk.send(b"n,,n=bob,r=x")
    talk.reply(auth_bytes=b"r=xy,s=c2FsdA==,i=4096")
    talk.send(b"c=biws,r=xy,p=d3Jvbmc=")
    outcome = talk.reply(FAILED, message="Authentication failed during authentication")
    assert isinstance(outcome, AuthenticationFailed)
    assert outcome.claimed_principal == "User:bob"
    assert talk.tracker.principal == ANONYMOUS


def test_scram_final_without_a_verifier_is_not_success() -> None:
    outcome = Conversation().scram("bob", final=b"e=invalid-proof")
    assert outcome == AuthenticationFailed("SCRAM-SHA-256", 0, None, "User:bob")


def test_oauthbearer_success() -> None:
    talk = Conversation()
    talk.handshake("OAUTHBEARER")
    talk.send(oauth_first(jws({"sub": "svc-orders"})))
    outcome = talk.reply()
    assert isinstance(outcome, Authenticated)
    assert talk.tracker.principal == "User:svc-orders"


def test_oauthbearer_error_challenge_is_a_failure_not_a_success() -> None:
    talk = Conversation()
    talk.handshake("OAUTHBEARER")
    talk.send(oauth_first(jws({"sub": "admin"})))
    # Kafka's invalid-token answer: error_code 0 with a JSON error as the challenge.
    assert talk.reply(auth_bytes=b'{"status":"invalid_token"}') is None
    assert talk.tracker.principal == ANONYMOUS
    talk.send(b"\x01")
    outcome = talk.reply(FAILED, message="invalid_token")
    assert outcome == AuthenticationFailed("OAUTHBEARER", 58, "invalid_token", "User:admin")
    assert talk.tracker.principal == ANONYMOUS


def test_oauthbearer_success_after_an_error_challenge_is_still_refused() -> None:
    talk = Conversation()
    talk.handshake("OAUTHBEARER")
    talk.send(oauth_first(jws({"sub": "admin"})))
    talk.reply(auth_bytes=b'{"status":"invalid_token"}')
    talk.send(b"\x01")
    assert isinstance(talk.reply(), AuthenticationFailed)
    assert talk.tracker.principal == ANONYMOUS


def test_custom_oauthbearer_claim() -> None:
    talk = Conversation()
    talk.tracker = SaslPrincipalTracker(principal_claim="client_id")
    talk.handshake("OAUTHBEARER")
    talk.send(oauth_first(jws({"sub": "x", "client_id": "orders-app"})))
    talk.reply()
    assert talk.tracker.principal == "User:orders-app"


# --- SASL: re-authentication (KIP-368) ---


def test_reauthentication_as_the_same_user() -> None:
    talk = Conversation()
    talk.scram("bob")
    outcome = talk.scram("bob")
    assert outcome == Authenticated("User:bob", "SCRAM-SHA-256", True, "User:bob", False)


def test_reauthentication_keeps_the_old_principal_until_success() -> None:
    talk = Conversation()
    talk.scram("bob")
    talk.handshake("SCRAM-SHA-256")
    talk.send(b"n,,n=bob,r=x")
    assert talk.tracker.principal == "User:bob"
    talk.reply(auth_bytes=b"r=xy,s=c2FsdA==,i=4096")
    talk.send(b"c=biws,r=xy,p=cHJvb2Y=")
    assert talk.tracker.principal == "User:bob"
    assert isinstance(talk.reply(auth_bytes=b"v=c2ln"), Authenticated)


def test_reauthentication_as_another_user_is_flagged_and_keeps_the_brokers_verdict() -> None:
    talk = Conversation()
    talk.scram("bob")
    outcome = talk.scram("mallory")
    assert outcome == Authenticated("User:mallory", "SCRAM-SHA-256", True, "User:bob", True)
    assert talk.tracker.principal == "User:mallory"


def test_failed_reauthentication_does_not_change_the_principal() -> None:
    talk = Conversation()
    talk.handshake("PLAIN")
    talk.send(b"\x00bob\x00pw")
    talk.reply()
    talk.handshake("PLAIN")
    talk.send(b"\x00mallory\x00pw")
    outcome = talk.reply(FAILED, message="Cannot change principals during re-authentication")
    assert isinstance(outcome, AuthenticationFailed)
    assert outcome.claimed_principal == "User:mallory"
    assert talk.tracker.principal == "User:bob"


# --- SASL: what must not be forwarded ---


def test_handshake_v0_is_refused() -> None:
    tracker = SaslPrincipalTracker()
    with pytest.raises(SaslStateError, match="v0"):
        tracker.handshake_request(handshake_v0.SaslHandshakeRequest(mechanism="PLAIN"))
    assert tracker.failed


@pytest.mark.parametrize("mechanism", ["GSSAPI", "SCRAM-SHA-1", "plain"])
def test_mechanisms_the_proxy_cannot_attribute_are_refused(mechanism: str) -> None:
    tracker = SaslPrincipalTracker()
    with pytest.raises(SaslError, match="cannot learn the principal"):
        tracker.handshake_request(handshake_v1.SaslHandshakeRequest(mechanism=mechanism))
    assert tracker.failed


def test_scram_delegation_token_is_refused() -> None:
    talk = Conversation()
    talk.handshake("SCRAM-SHA-512")
    with pytest.raises(SaslError, match="delegation token"):
        talk.send(b"n,,n=tokenid,r=x,tokenauth=true")
    assert talk.tracker.failed


def test_unparseable_auth_bytes_fail_the_exchange() -> None:
    talk = Conversation()
    talk.handshake("PLAIN")
    with pytest.raises(SaslParseError):
        talk.send(b"\x00\x00")
    assert talk.tracker.failed
    with pytest.raises(SaslStateError):
        talk.reply()


@pytest.mark.parametrize(
    "steps",
    [
        ["send"],
        ["reply"],
        ["handshake_response"],
        ["handshake_request", "handshake_request"],
        ["handshake_request", "send"],
        ["handshake", "reply"],
        ["handshake", "send", "send"],
        ["handshake", "send", "handshake_request"],
    ],
)
def test_out_of_order_messages_are_refused(steps: list[str]) -> None:
    talk = Conversation()
    tracker = talk.tracker
    actions = {
        "handshake": lambda: talk.handshake("PLAIN"),
        "handshake_request": lambda: tracker.handshake_request(
            handshake_v1.SaslHandshakeRequest(mechanism="PLAIN")
        ),
        "handshake_response": lambda: tracker.handshake_response(
            handshake_v1.SaslHandshakeResponse(error_code=OK, mechanisms=("PLAIN",))
        ),
        "send": lambda: talk.send(b"\x00bob\x00pw"),
        "reply": talk.reply,
    }
    for step in steps[:-1]:
        actions[step]()
    with pytest.raises(SaslStateError, match="unexpected"):
        actions[steps[-1]]()
    assert tracker.failed


def test_decoded_wire_frames_drive_the_tracker() -> None:
    """Real frames through the codec: header, SaslAuthenticate v2 body, response v2 body."""
    request = auth_v2.SaslAuthenticateRequest(auth_bytes=JAVA_SCRAM_256)
    frame = request_header(36, 2, 7, "rdkafka") + encode(request)
    header = peek_request_header(frame)
    assert (header.api_key, header.api_version, header.client_id) == (36, 2, "rdkafka")
    decoded = decode_exact(request_class(36, 2), frame, request_body_offset(frame, header))
    body = encode(
        auth_v2.SaslAuthenticateResponse(error_code=OK, error_message=None, auth_bytes=b"r=a")
    )
    response = decode_exact(response_class(36, 2), body)

    talk = Conversation()
    talk.handshake("SCRAM-SHA-256")
    talk.tracker.authenticate_request(decoded)
    assert talk.tracker.authenticate_response(response) is None
    assert talk.tracker.principal == ANONYMOUS
