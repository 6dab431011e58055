"""The OAUTHBEARER client message (RFC 7628) as Kafka's OAuthBearerClientInitialResponse."""

from __future__ import annotations

import pytest

from kafka_policy_proxy.codec.oauthbearer_client import (
    ERROR_ACKNOWLEDGEMENT,
    error_status,
    initial_response,
)
from kafka_policy_proxy.codec.sasl import parse_client_first

# header.payload.signature: {"alg":"none"} . {"sub":"svc-proxy"} . sig
TOKEN = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJzdmMtcHJveHkifQ.c2ln"


def test_the_initial_response_has_the_gs2_header_token_extensions_and_end() -> None:
    message = initial_response(TOKEN, {"logicalCluster": "lkc-1", "identityPoolId": "pool-9"})
    assert message == (
        b"n,,\x01auth=Bearer " + TOKEN.encode() + b"\x01logicalCluster=lkc-1"
        b"\x01identityPoolId=pool-9\x01\x01"
    )


def test_without_extensions_only_the_token_is_sent() -> None:
    assert initial_response(TOKEN) == b"n,,\x01auth=Bearer " + TOKEN.encode() + b"\x01\x01"


def test_the_proxys_own_parser_reads_the_principal_from_it() -> None:
    # The same bytes a client sends through the proxy: the relay attributes them to `sub`.
    identity = parse_client_first("OAUTHBEARER", initial_response(TOKEN))
    assert identity.username == "svc-proxy"


@pytest.mark.parametrize(
    ("token", "extensions"),
    [
        ("has space", {}),
        ("", {}),
        (TOKEN, {"auth": "x"}),
        (TOKEN, {"bad-key": "x"}),
        (TOKEN, {"k": "\x01injected"}),
    ],
)
def test_what_would_break_the_message_is_refused(token: str, extensions: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        initial_response(token, extensions)


def test_the_error_challenge_is_read_and_acknowledged_with_a_lone_separator() -> None:
    assert error_status(b'{"status":"invalid_token"}') == "invalid_token"
    assert error_status(b'{"status":"insufficient_scope","scope":"kafka"}') == (
        "insufficient_scope (scope kafka)"
    )
    assert error_status(b"not json") == "the broker refused the token"
    assert ERROR_ACKNOWLEDGEMENT == b"\x01"
