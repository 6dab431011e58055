"""Principals: SASL names are trusted only after the broker agrees; TLS DNs and rules match Kafka.

Expected DNs and mapped names were produced by the JDK's X500Principal.getName() and Kafka
4.1.1's SslPrincipalMapper on the same inputs.
"""

from __future__ import annotations

import re
import ssl
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate import v0 as auth_v0
from kio.schema.sasl_authenticate import v1 as auth_v1
from kio.schema.sasl_authenticate import v2 as auth_v2
from kio.schema.sasl_handshake import v0 as handshake_v0
from kio.schema.sasl_handshake import v1 as handshake_v1

from codec.header import peek_request_header, request_body_offset, request_header
from codec.registry import decode_exact, encode, request_class, response_class
from codec.sasl import SaslError, SaslParseError, scram_escape
from proxy.principal import (
    ANONYMOUS,
    Authenticated,
    AuthenticationFailed,
    MappingRuleError,
    NoMatchingRuleError,
    SaslPrincipalTracker,
    SaslStateError,
    parse_mapping_rules,
    split_mapping_rules,
    subject_dn,
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


# --- TLS: subject DN as X500Principal.getName() prints it ---

CERT = """-----BEGIN CERTIFICATE-----
MIIEZzCCA0+gAwIBAgIUJz8kkWDooa9dnVfKfzGf3GMQKZ8wDQYJKoZIhvcNAQEL
BQAwgcIxCzAJBgNVBAYTAlVTMQswCQYDVQQIDAJDQTETMBEGA1UECgwKQWNtZSwg
SW5jLjEQMA4GA1UECwwHZW5nK29wczEOMAwGA1UECwwFI3RlYW0xHjAcBgNVBAMM
FSBhbGljZT1hZG1pbjsgPHg+InEiIDEgMB4GCSqGSIb3DQEJARYRYWxpY2VAZXhh
bXBsZS5jb20xDjAMBgNVBAUTBTEyMzQ1MQswCQYDVQQMDAJEcjEQMA4GA1UEYQwH
VkFUREUtMTAeFw0yNjExMjIwNDQ5NTBaFw0zNjExMTkwNDQ5NTBaMIHCMQswCQYD
VQQGEwJVUzELMAkGA1UECAwCQ0ExEzARBgNVBAoMCkFjbWUsIEluYy4xEDAOBgNV
BAsMB2VuZytvcHMxDjAMBgNVBAsMBSN0ZWFtMR4wHAYDVQQDDBUgYWxpY2U9YWRt
aW47IDx4PiJxIiAxIDAeBgkqhkiG9w0BCQEWEWFsaWNlQGV4YW1wbGUuY29tMQ4w
DAYDVQQFEwUxMjM0NTELMAkGA1UEDAwCRHIxEDAOBgNVBGEMB1ZBVERFLTEwggEi
MA0GCSqGSIb3DQEBAQUAA4IBDwAwggEKAoIBAQCc9Of2MMq7/Tv/15dUCHgRSXdO
s3IjpWwP6FwgmA6tfBGAV62C0uAAF9K8TTVmdLHP5dX66c6ZrneJUPxrEZbObfbN
Jn2b6k9ES5tUfcb2tFl0sSf1nPcXXZc+ziuOCd0zikLNVjecl7XVFAfVo2jJL+zD
EMchYvvwRW/yraikfGhq0cPG+4t5uk39nSvNzZUmbJu0QTC/kobkUqfBSgV2nUUI
Hp+UPNYnk6Rv6yOZD79O+cMTxpZy/iRFqAbiy6CMKdOjbICFHCD4J9ZsPfl2rrFG
24ldzUj8owjvURLwE0EDTpEF04eees+9Snlrz6HOoJ+ChPDyPXyDE3cicftFAgMB
AAGjUzBRMB0GA1UdDgQWBBT74LAID0waOlVQ+3ydhD9aPdUBrzAfBgNVHSMEGDAW
gBT74LAID0waOlVQ+3ydhD9aPdUBrzAPBgNVHRMBAf8EBTADAQH/MA0GCSqGSIb3
DQEBCwUAA4IBAQCXo7IkZOmBRoPtM8DPknh0YZpsqLXAcUFZc8h42WtAuU/lWDO9
/ied/OM741vtyj4IS6qlg6qf45bKZTiSoDbAcGcytXRF2E/z7+/TSHKVqx6L2ahj
K4JKpwtkVSw8RdUoRhqfxUlWAWGsJixlNEaZYnnPd8JOC3r/Koi507w7S753hg/P
lUY5PYA9MYDdJyHfzTqmqgCOjda92Wwy6TErDW1XALLI8acoa7tuS2TN39KMCVtV
mxvPtndmg0BT/BMZrROifEoITrCAkP72QHHfBszCIMpqD8f9ZCzATFLQqByz0Nf9
2Me7NXWl/jrX26pMzi40GjxV31GFZe1wA7M5
-----END CERTIFICATE-----
"""
CERT_DN = (
    "2.5.4.97=#0c0756415444452d31,2.5.4.12=#0c024472,2.5.4.5=#13053132333435,"
    "1.2.840.113549.1.9.1=#1611616c696365406578616d706c652e636f6d,"
    'CN=\\ alice\\=admin\\; \\<x\\>\\"q\\"\\ ,OU=\\#team,OU=eng\\+ops,O=Acme\\, Inc.,ST=CA,C=US'
)


def test_dn_of_a_real_certificate(tmp_path: Path) -> None:
    path = tmp_path / "client.pem"
    path.write_text(CERT)
    # The same decoder getpeercert() uses, so this is the structure the proxy will see.
    subject = ssl._ssl._test_decode_cert(str(path))["subject"]  # type: ignore[attr-defined]
    assert subject_dn(subject) == CERT_DN


@pytest.mark.parametrize(
    ("subject", "dn"),
    [
        (
            [
                [("domainComponent", "com")],
                [("domainComponent", "example")],
                [("userId", "bob"), ("commonName", "Bob M\u00fcller")],
                [("streetAddress", "1 Main St")],
                [("localityName", "Z\u00fcrich\\x")],
            ],
            "L=Z\u00fcrich\\\\x,STREET=1 Main St,UID=bob+CN=Bob M\u00fcller,DC=example,DC=com",
        ),
        (
            [
                [("commonName", "  #x,y ")],
                [("emailAddress", "a" * 116 + "@example.com")],
            ],
            "1.2.840.113549.1.9.1=#168180"
            + "61" * 116
            + "406578616d706c652e636f6d,CN=\\ \\ \\#x\\,y\\ ",
        ),
        ([[("commonName", "   ")]], "CN=\\ \\ \\ "),
        ([[("commonName", "a\x00b\r")]], "CN=a\\00b\\\r"),
        ([[("1.2.3.4", "v")]], "1.2.3.4=#0c0176"),
        ([], ""),
    ],
)
def test_dn_matches_java(subject: list[list[tuple[str, str]]], dn: str) -> None:
    assert subject_dn(subject) == dn


def test_dn_refuses_attributes_without_a_known_oid() -> None:
    with pytest.raises(ValueError, match="'favouriteColour'"):
        subject_dn([[("favouriteColour", "blue")]])


# --- TLS: ssl.principal.mapping.rules ---

KAFKA_RULES = [
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
    "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
    "DEFAULT",
]


@pytest.mark.parametrize(
    ("dn", "name"),
    [
        ("CN=Duke,OU=ServiceUsers,O=Org,C=US", "duke"),
        ("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US", "duke@sme"),
        ("cn=duke,ou=sme,dc=mycp,dc=com", "DUKE@SME"),
        ("cN=duke,OU=JavaSoft,O=Sun Microsystems", "DUKE"),
        ("OU=JavaSoft,O=Sun Microsystems,C=US", "OU=JavaSoft,O=Sun Microsystems,C=US"),
    ],
)
def test_kafka_mapping_examples(dn: str, name: str) -> None:
    mapper = parse_mapping_rules(KAFKA_RULES)
    assert mapper.map(dn) == name
    assert mapper.principal(dn) == f"User:{name}"


def test_escaped_comma_in_a_dn() -> None:
    mapper = parse_mapping_rules(split_mapping_rules(r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT"))
    assert mapper.map("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"


def test_the_certificate_dn_maps_end_to_end() -> None:
    mapper = parse_mapping_rules([r"RULE:^.*,CN=\\ ([a-z]+)\\=.*$/$1/U"])
    assert mapper.principal(CERT_DN) == "User:ALICE"


@pytest.mark.parametrize(
    ("rules", "dn", "name"),
    [
        (["RULE:CN=([a-z]+)/$1@$4/"], "CN=bob", "bob@$4"),  # beyond the groups: literal
        (["RULE:CN=([a-z]+)/$12/"], "CN=bob", "bob2"),  # Java takes digits while a group exists
        (["RULE:CN=([a-z]+)/$01/"], "CN=bob", "bob"),
        (["RULE:CN=([a-z]+)/$0/"], "CN=bob", "CN=bob"),
        (["RULE:CN=([a-z]+)/\\$1/"], "CN=bob", "$1"),
        (["RULE:CN=([a-z]+)/a\\/b$1/U"], "CN=bob", "A/BBOB"),
        (["RULE:CN=([a-z]+),O=a\\/b/$1/"], "CN=bob,O=a/b", "bob"),
        (["RULE:CN=(a)(b)?/[$2]/"], "CN=a", "[]"),
        (["RULE:CN=(?P<who>[a-z]+)/${who}/"], "CN=bob", "bob"),
        (["RULE:(.*)/x/"], "abc", "xx"),  # replaceAll also replaces the empty match at the end
        (["RULE:(.*?)/x/"], "abc", "xaxbxcx"),  # and steps past empty matches as Java does
        (["RULE:CN=([^,]+).*/$1/L"], "CN=\u00c4BC,O=x", "\u00e4bc"),
        (["RULE:CN=([^,]+).*/$1/U"], "CN=stra\u00dfe,O=x", "STRASSE"),
        ([" RULE:CN=(.*)/$1/ "], "CN=bob", "bob"),  # surrounding whitespace, as Kafka trims
        (["DEFAULT"], "", ""),
        (
            ["RULE:(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)(k)/$10-$11-$12/"],
            "abcdefghijk",
            "j-k-a2",
        ),
    ],
)
def test_replacements_follow_java_and_kafka(rules: list[str], dn: str, name: str) -> None:
    assert parse_mapping_rules(rules).map(dn) == name


def test_ascii_classes_as_in_java() -> None:
    mapper = parse_mapping_rules([r"RULE:\w+=(\w+)/$1/"])
    assert mapper.map("CN=bob") == "bob"
    with pytest.raises(NoMatchingRuleError):
        mapper.map("CN=b\u00f6b")


def test_no_matching_rule_raises_like_kafka() -> None:
    mapper = parse_mapping_rules(["RULE:^CN=([a-z]+)$/$1/", "RULE:^O=(.*)$/$1/"])
    assert mapper.map("O=acme") == "acme"
    with pytest.raises(NoMatchingRuleError, match="OU=x"):
        mapper.map("OU=x")
    with pytest.raises(NoMatchingRuleError):
        parse_mapping_rules([]).map("CN=bob")


@pytest.mark.parametrize(
    ("value", "rules"),
    [
        ("", []),
        ("DEFAULT", ["DEFAULT"]),
        ("RULE://,DEFAULT", ["RULE://", "DEFAULT"]),
        ("  RULE:   /     / ,  DEFAULT  ", ["RULE:   /     /", "DEFAULT"]),
        (
            "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ",
            ["RULE:([A-Z]*)/$1/U", "RULE:([a-z]+)/$1/", "DEFAULT"],
        ),
        (",   , , ,      , , ,   ", []),
        (",,RULE://,,,DEFAULT,,", ["RULE://", "DEFAULT"]),
        ("RULE:\\**\\/+/*/L,RULE:\\/*\\**/**/", ["RULE:\\**\\/+/*/L", "RULE:\\/*\\**/**/"]),
        (
            "RULE:,RULE:,/,RULE:,\\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,"
            "RULE:, DEFAULT, /DEFAULT/,DEFAULT",
            [
                "RULE:,RULE:,/,RULE:,\\//U",
                "RULE:,/RULE:,/",
                "RULE:,RULE:,/L,RULE:,/L",
                "RULE:, DEFAULT, /DEFAULT/",
                "DEFAULT",
            ],
        ),
        ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT", [KAFKA_RULES[0], "DEFAULT"]),
        ("default, DEFAULT", ["default", "DEFAULT"]),
    ],
)
def test_splitting_kafkas_comma_separated_form(value: str, rules: list[str]) -> None:
    assert split_mapping_rules(value) == rules


@given(
    st.text(
        st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r\x85\u2028\u2029")
    )
)
def test_slash_and_comma_escaping_round_trips(dn: str) -> None:
    literal = re.escape(dn).replace("/", "\\/")
    mapper = parse_mapping_rules(split_mapping_rules(f"RULE:{literal}/ok,\\/done/, DEFAULT"))
    assert mapper.map(dn) == "ok,/done"
    assert mapper.map(dn + "x") == dn + "x"


@pytest.mark.parametrize(
    ("rules", "position", "reason"),
    [
        (["default"], 1, "expected DEFAULT or RULE"),
        (["DEFAUL"], 1, "expected DEFAULT or RULE"),
        (["DEFAULT/L"], 1, "expected DEFAULT or RULE"),
        (["DEFAULT", "rule:^CN=(.*?)$/$1/"], 2, "expected DEFAULT or RULE"),
        (["RULE:CN=(.*?),OU=ServiceUsers.*/$1"], 1, "expected DEFAULT or RULE"),
        (["RULE:^CN=(.*?)$/$1/L/U"], 1, "expected DEFAULT or RULE"),
        (["RULE:^CN=(.*?)$/L"], 1, "expected DEFAULT or RULE"),
        (["RULE:a/b/ L"], 1, "expected DEFAULT or RULE"),
        (["RULE:a/b/LU"], 1, "expected DEFAULT or RULE"),
        (["DEFAULT", "DEFAULT", ""], 3, "expected DEFAULT or RULE"),
        (["DEFAULT", "RULE:(/x/"], 2, "bad regex: missing \\)"),
        (["RULE:[a-z&&[^b]]/x/"], 1, "bad regex: Possible set intersection"),
        (["RULE:\\p{Alpha}/x/"], 1, "bad regex"),
        # Kafka accepts these, then throws on every DN they match:
        (["RULE:CN=a/$1/"], 1, "group 1, which the regex lacks"),
        (["RULE:CN=(a)/$1$2$3/"], 1, "group 3, which the regex lacks"),
        (["RULE:CN=(a)/x$y/"], 1, "'\\$' must start a group reference"),
        (["RULE:CN=(a)/x$/"], 1, "'\\$' must start a group reference"),
        (["RULE:CN=(a)/${nope}/"], 1, "names group \\{nope\\}"),
        (["RULE:CN=(a)/$99999999999/"], 1, "overflows"),
    ],
)
def test_bad_rules_name_their_position_and_reason(
    rules: list[str], position: int, reason: str
) -> None:
    with pytest.raises(MappingRuleError, match=reason) as caught:
        parse_mapping_rules(rules)
    assert caught.value.position == position
    assert str(caught.value).startswith(f"principal mapping rule {position} (")
