"""SASL auth bytes: real client messages give the broker's name; junk raises SaslParseError."""

from __future__ import annotations

import base64
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_policy_proxy.codec.sasl import (
    OAUTHBEARER,
    PLAIN,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ClientIdentity,
    SaslParseError,
    parse_client_first,
    parse_oauthbearer,
    parse_plain,
    parse_scram_client_first,
    scram_escape,
    scram_unescape,
)

# Captured from the Java client's own SASL clients (kafka-clients 4.1.1 on JDK 17) for the
# user "alice,ops=admin" with password "s3cret".
JAVA_PLAIN = bytes.fromhex("00616c6963652c6f70733d61646d696e00733363726574")
JAVA_SCRAM_256 = bytes.fromhex(
    "6e2c2c6e3d616c6963653d32436f70733d334461646d696e2c723d356d30663633796a37647370"
    "7a656c7962787074706c647773"
)
JAVA_SCRAM_512 = bytes.fromhex(
    "6e2c2c6e3d616c6963653d32436f70733d334461646d696e2c723d71656d3831617667676e7830"
    "6b736b7530766e336f7273326f"
)
JAVA_USER = "alice,ops=admin"


def librdkafka_plain(user: str, password: str) -> bytes:
    """librdkafka's builtin PLAIN: empty authzid, NUL, user, NUL, password."""
    return b"\x00" + user.encode() + b"\x00" + password.encode()


def librdkafka_scram_first(user: str, seed: int) -> bytes:
    """librdkafka's builtin SCRAM: `n,,n=<safe user>,r=<32 random chars in 0x2d..0x7e>`."""
    rng = random.Random(seed)
    nonce = "".join(chr(rng.randint(0x2D, 0x7E)) for _ in range(32))
    return f"n,,n={scram_escape(user)},r={nonce}".encode()


def jws(claims: object, header: object = None) -> str:
    """An unsecured compact JWS (empty signature), as Kafka's unsecured login module makes."""

    def part(value: object) -> str:
        raw = value if isinstance(value, bytes) else json.dumps(value).encode()
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    return f"{part(header or {'alg': 'none'})}.{part(claims)}."


def oauth_first(token: str, gs2: str = "n,,", extras: str = "") -> bytes:
    """Kafka's OAuthBearerClientInitialResponse layout."""
    return f"{gs2}\x01auth=Bearer {token}{extras}\x01\x01".encode()


# --- PLAIN ---


def test_plain_from_the_java_client() -> None:
    assert parse_plain(JAVA_PLAIN) == ClientIdentity(JAVA_USER)


def test_plain_from_librdkafka() -> None:
    assert parse_plain(librdkafka_plain("bob", "pw")) == ClientIdentity("bob")


def test_plain_authzid_equal_to_authcid_is_accepted() -> None:
    assert parse_plain(b"bob\x00bob\x00pw").username == "bob"


@pytest.mark.parametrize(
    ("auth_bytes", "reason"),
    [
        (b"mallory\x00bob\x00pw", "authorization id differs"),
        (b"\x00\x00pw", "username not specified"),
        (b"no-nul-at-all", "username not specified"),
        (b"\x00bob", "password not specified"),
        (b"\x00bob\x00", "password not specified"),
        (b"\x00b\xffob\x00pw", "not valid UTF-8"),
    ],
)
def test_plain_refusals(auth_bytes: bytes, reason: str) -> None:
    with pytest.raises(SaslParseError, match=reason):
        parse_plain(auth_bytes)


def test_plain_reads_three_fields_like_kafka() -> None:
    assert parse_plain(b"\x00bob\x00pw\x00trailing\x00junk").username == "bob"


def test_errors_never_quote_the_password() -> None:
    with pytest.raises(SaslParseError) as caught:
        parse_plain(b"mallory\x00bob\x00hunter2")
    assert "hunter2" not in str(caught.value)
    assert "bob" not in str(caught.value)


# --- SCRAM ---


@pytest.mark.parametrize(
    ("mechanism", "auth_bytes"),
    [(SCRAM_SHA_256, JAVA_SCRAM_256), (SCRAM_SHA_512, JAVA_SCRAM_512)],
)
def test_scram_from_the_java_client(mechanism: str, auth_bytes: bytes) -> None:
    assert parse_scram_client_first(auth_bytes, mechanism) == ClientIdentity(JAVA_USER)


@pytest.mark.parametrize("seed", range(5))
def test_scram_from_librdkafka(seed: int) -> None:
    first = librdkafka_scram_first("svc=etl,eu", seed)
    assert parse_scram_client_first(first).username == "svc=etl,eu"


@pytest.mark.parametrize(
    "message",
    [
        "n,,n=bob,r=abc",
        "y,,n=bob,r=abc",
        "p=tls-unique,,n=bob,r=abc",
        "n,a=bob,n=bob,r=abc",
        "n,,m=future,n=bob,r=abc",
        "n,,n=bob,r=abc,ext=1,other=x=y",
        "n,,n=bob,r=abc=def",
    ],
)
def test_scram_gs2_header_and_extension_variants(message: str) -> None:
    assert parse_scram_client_first(message.encode()) == ClientIdentity("bob")


def test_scram_authzid_is_compared_unescaped() -> None:
    assert parse_scram_client_first(b"n,a=a=2Cb,n=a=2Cb,r=x").username == "a,b"


@pytest.mark.parametrize("value", ["true", "TRUE", "True"])
def test_scram_delegation_token_is_flagged(value: str) -> None:
    first = parse_scram_client_first(f"n,,n=tokenid,r=x,tokenauth={value}".encode())
    assert first == ClientIdentity("tokenid", delegation_token=True)


def test_scram_tokenauth_false_is_a_plain_user() -> None:
    assert not parse_scram_client_first(b"n,,n=bob,r=x,tokenauth=false").delegation_token


@pytest.mark.parametrize(
    "message",
    [
        b"n,a=mallory,n=bob,r=abc",  # authzid differs
        b"n,,n=b=41ob,r=abc",  # "=" must start =2C or =3D
        b"n,,n=,r=abc",  # empty username
        b"n,,n=bob",  # no nonce
        b"n,,n=bob,r=a,b",  # "," in the nonce, or an extension without "="
        b"n,,r=abc,n=bob",  # wrong order
        b"x,,n=bob,r=abc",  # unknown channel-binding flag
        b"n,n=bob,r=abc",  # gs2 header lacks its second comma
        b"n,,n=bob,r=abc ",  # space is not printable
        b"n,,n=b\x00b,r=abc",
        b"n,,n=\xc3(,r=abc",
        b"",
    ],
)
def test_scram_refusals(message: bytes) -> None:
    with pytest.raises(SaslParseError):
        parse_scram_client_first(message, SCRAM_SHA_512)


usernames = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1
)


@given(usernames)
def test_scram_escape_round_trips(name: str) -> None:
    escaped = scram_escape(name)
    assert "," not in escaped
    assert scram_unescape(escaped) == name


@given(usernames, st.text("abcdefghijklmnopqrstuvwxyz0123456789+/=", min_size=1))
def test_scram_client_first_round_trips(name: str, nonce: str) -> None:
    first = f"n,,n={scram_escape(name)},r={nonce}".encode()
    assert parse_scram_client_first(first).username == name


# --- OAUTHBEARER ---


def test_oauthbearer_reads_sub_from_the_unverified_jwt() -> None:
    token = jws({"sub": "alice", "exp": 2**40, "scope": "kafka"})
    assert parse_oauthbearer(oauth_first(token)) == ClientIdentity("alice")


def test_oauthbearer_with_extensions_authzid_and_escaped_claim() -> None:
    token = jws({"sub": "caf\u00e9,1"})
    message = oauth_first(token, gs2="n,a=caf\u00e9=2C1,", extras="\x01traceId=abc 123")
    assert parse_oauthbearer(message).username == "caf\u00e9,1"


def test_oauthbearer_scheme_is_case_insensitive_and_claim_configurable() -> None:
    token = jws({"sub": "x", "email": "bob@example.com"})
    message = f"n,,\x01auth=bearer {token}\x01\x01".encode()
    assert parse_oauthbearer(message, principal_claim="email").username == "bob@example.com"


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (oauth_first(jws({"iss": "x"})), "no non-blank string claim 'sub'"),
        (oauth_first(jws({"sub": 42})), "no non-blank string claim"),
        (oauth_first(jws({"sub": "  "})), "no non-blank string claim"),
        (oauth_first(jws({"sub": " bob"})), "surrounding whitespace"),
        (oauth_first(jws(["sub", "bob"])), "no non-blank string claim"),
        (oauth_first(jws(b'{"sub":"bob","sub":"admin"}')), "duplicate"),
        (oauth_first(jws(b"not json")), "base64url JSON"),
        (oauth_first(jws(b"\xff\xfe")), "base64url JSON"),
        (oauth_first(jws(b"[" * 100_000 + b"]" * 100_000)), "base64url JSON"),
        (oauth_first("a.b.c.d.e"), "compact JWS"),
        (oauth_first("a.b"), "compact JWS"),
        (oauth_first("a.b_c-d.e"), "base64url JSON"),
        (oauth_first(jws({"sub": "bob"}), gs2="n,a=mallory,"), "authorization id differs"),
        (f"n,,\x01auth=Basic {jws({'sub': 'b'})}\x01\x01".encode(), "not 'Bearer"),
        (b"n,,\x01auth=Bearer\x01\x01", "not 'Bearer"),
        (b"n,,\x01host=x\x01\x01", "exactly one 'auth'"),
        (
            oauth_first(jws({"sub": "a"}), extras=f"\x01auth=Bearer {jws({'sub': 'b'})}"),
            "one 'auth'",
        ),
        (b"\x01", "not an OAUTHBEARER client initial response"),
        (oauth_first(jws({"sub": "bob"}))[:-1], "not an OAUTHBEARER client initial response"),
    ],
)
def test_oauthbearer_refusals(message: bytes, reason: str) -> None:
    with pytest.raises(SaslParseError, match=reason):
        parse_oauthbearer(message)


def test_oauthbearer_errors_never_quote_the_token() -> None:
    token = jws({"sub": "bob"}, header={"alg": "none", "secret": "tok3n"})
    with pytest.raises(SaslParseError) as caught:
        parse_oauthbearer(oauth_first(token, gs2="n,a=mallory,"))
    assert token not in str(caught.value)


# --- dispatch and hostile input ---


@pytest.mark.parametrize(
    ("mechanism", "auth_bytes", "username"),
    [
        (PLAIN, JAVA_PLAIN, JAVA_USER),
        (SCRAM_SHA_256, JAVA_SCRAM_256, JAVA_USER),
        (SCRAM_SHA_512, JAVA_SCRAM_512, JAVA_USER),
        (OAUTHBEARER, oauth_first(jws({"sub": "carol"})), "carol"),
    ],
)
def test_parse_client_first_dispatches(mechanism: str, auth_bytes: bytes, username: str) -> None:
    assert parse_client_first(mechanism, auth_bytes).username == username


@pytest.mark.parametrize("mechanism", ["GSSAPI", "plain", "SCRAM-SHA-1", ""])
def test_parse_client_first_refuses_other_mechanisms(mechanism: str) -> None:
    with pytest.raises(SaslParseError, match="not supported"):
        parse_client_first(mechanism, JAVA_PLAIN)


MECHANISMS = [PLAIN, SCRAM_SHA_256, OAUTHBEARER]
VALID = {
    PLAIN: JAVA_PLAIN,
    SCRAM_SHA_256: JAVA_SCRAM_256,
    OAUTHBEARER: oauth_first(jws({"sub": "carol", "n": [1, {"a": None}]})),
}


@settings(max_examples=1_000, deadline=None)
@given(st.sampled_from(MECHANISMS), st.binary(max_size=200))
def test_random_bytes_only_raise_sasl_parse_error(mechanism: str, data: bytes) -> None:
    try:
        identity = parse_client_first(mechanism, data)
    except SaslParseError:
        return
    assert identity.username


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(MECHANISMS), st.data())
def test_mutated_messages_only_raise_sasl_parse_error(mechanism: str, data: st.DataObject) -> None:
    message = bytearray(VALID[mechanism])
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(message) - 1))
        message[at] = data.draw(st.integers(0, 255))
    try:
        identity = parse_client_first(mechanism, bytes(message))
    except SaslParseError:
        return
    assert identity.username
