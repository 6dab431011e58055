"""OAUTHBEARER tokens: fetched with the client-credentials grant, refreshed before expiry with
an injected clock, retried with backoff, and never handed out expired."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import pytest

from harness.oauth_provider import AUDIENCE, OAuthProvider
from kafka_policy_proxy.proxy.kafka_client.oauth import OAuthSettings, RefreshRules
from kafka_policy_proxy.proxy.kafka_client.token_source import (
    Token,
    TokenSource,
    TokenUnavailable,
    fetch_token,
    jwt_claims,
    parse_token_response,
)
from kafka_policy_proxy.proxy.metrics import OAUTH_TOKEN_FETCHES

RULES = RefreshRules(window_jitter=0.0, retry_backoff_s=1.0, retry_backoff_max_s=4.0)
SETTINGS = OAuthSettings("http://idp/token", "proxy", "secret", None, {}, RULES)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Endpoint:
    """A scripted token endpoint: each fetch issues a 100 s token, or fails while `down`."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.fetches: list[float] = []
        self.down = False

    async def __call__(self, settings: OAuthSettings, timeout_s: float) -> Token:
        self.fetches.append(self.clock.now)
        if self.down:
            raise TokenUnavailable("HTTP 503")
        return Token(f"t{len(self.fetches)}", self.clock.now, self.clock.now + 100)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def endpoint(clock: Clock) -> Endpoint:
    return Endpoint(clock)


def source(endpoint: Endpoint, clock: Clock) -> TokenSource:
    return TokenSource(SETTINGS, fetch=endpoint, clock=clock, rand=lambda: 0.0, background=False)


async def test_the_token_is_cached_until_its_refresh_time(clock: Clock, endpoint: Endpoint) -> None:
    tokens = source(endpoint, clock)
    assert await tokens.token() == "t1"
    clock.now += 79  # before 80% of the 100 s lifetime
    assert await tokens.token() == "t1"
    clock.now += 1  # at 80%: refreshed, 20 s before it expires
    assert await tokens.token() == "t2"
    assert endpoint.fetches == [1000.0, 1080.0]


async def test_a_failed_refresh_keeps_the_valid_token_and_backs_off(
    clock: Clock, endpoint: Endpoint
) -> None:
    tokens = source(endpoint, clock)
    await tokens.token()
    errors = OAUTH_TOKEN_FETCHES.labels(result="error")._value.get()
    endpoint.down = True
    clock.now = 1080.0
    assert await tokens.token() == "t1"  # still valid for 20 s
    assert "HTTP 503" in (tokens.last_error or "")
    clock.now += 0.5
    assert await tokens.token() == "t1"  # within the 1 s backoff: no new request
    clock.now += 0.5
    assert await tokens.token() == "t1"
    clock.now += 1.9  # the second backoff is 2 s
    assert await tokens.token() == "t1"
    assert endpoint.fetches == [1000.0, 1080.0, 1081.0]
    assert OAUTH_TOKEN_FETCHES.labels(result="error")._value.get() == errors + 2
    endpoint.down = False
    clock.now += 0.1
    assert await tokens.token() == "t4"
    assert tokens.last_error is None


async def test_an_expired_token_is_never_handed_out(clock: Clock, endpoint: Endpoint) -> None:
    tokens = source(endpoint, clock)
    await tokens.token()
    endpoint.down = True
    clock.now = 1099.5  # within a second of expiry: too late to send
    with pytest.raises(TokenUnavailable, match="HTTP 503"):
        await tokens.token()
    clock.now = 1200.0
    with pytest.raises(TokenUnavailable):
        await tokens.token()


async def test_without_a_token_a_failure_raises_and_backs_off(
    clock: Clock, endpoint: Endpoint
) -> None:
    endpoint.down = True
    tokens = source(endpoint, clock)
    for _ in range(3):  # every connection attempt within the backoff gets the same answer
        with pytest.raises(TokenUnavailable, match="http://idp/token: HTTP 503"):
            await tokens.token()
    assert endpoint.fetches == [1000.0]
    clock.now += 1.0
    endpoint.down = False
    assert await tokens.token() == "t2"


async def test_the_token_is_refreshed_in_the_background_when_due() -> None:
    fetched: list[float] = []

    async def fetch(settings: OAuthSettings, timeout_s: float) -> Token:
        now = time.time()
        fetched.append(now)
        return Token(f"t{len(fetched)}", now, now + 2.2)

    rules = RefreshRules(window_factor=0.5, window_jitter=0.0, min_period_s=0, buffer_s=0)
    settings = OAuthSettings("http://idp/token", "proxy", "secret", None, {}, rules)
    tokens = TokenSource(settings, fetch=fetch)
    try:
        assert await tokens.token() == "t1"
        await asyncio.sleep(1.3)  # refresh due at 1.1 s; nobody asks for a token meanwhile
        assert len(fetched) == 2
        assert fetched[1] - fetched[0] == pytest.approx(1.1, abs=0.15)
        assert await tokens.token() == "t2"
    finally:
        tokens.close()


def test_the_expiry_comes_from_the_jwt_else_expires_in() -> None:
    jwt = "e30." + "eyJleHAiOjIwMDAsImlhdCI6MTAwMH0" + ".c2ln"  # {"exp":2000,"iat":1000}
    assert jwt_claims(jwt) == {"exp": 2000, "iat": 1000}
    assert parse_token_response(json.dumps({"access_token": jwt}).encode(), 5.0) == Token(
        jwt, 1000.0, 2000.0
    )
    opaque = json.dumps({"access_token": "opaque", "expires_in": 60}).encode()
    assert parse_token_response(opaque, 5.0) == Token("opaque", 5.0, 65.0)
    for bad in (b"{}", b"[]", b"nope", json.dumps({"access_token": "opaque"}).encode()):
        with pytest.raises(TokenUnavailable):
            parse_token_response(bad, 5.0)


@pytest.fixture
def provider() -> Iterator[OAuthProvider]:
    idp = OAuthProvider("127.0.0.1", 0, {"proxy": "pa ss:wörd"}, lifetime_s=300).start()
    try:
        yield idp
    finally:
        idp.stop()


async def test_a_real_endpoint_issues_a_jwt_for_the_client_credentials(
    provider: OAuthProvider,
) -> None:
    settings = OAuthSettings(provider.token_url, "proxy", "pa ss:wörd", "kafka", {})
    token = await fetch_token(settings, 5.0)
    claims = jwt_claims(token.value)
    assert (claims["sub"], claims["aud"]) == ("proxy", AUDIENCE)
    assert token.expiry - token.start == 300
    assert [r.client_id for r in provider.issued()] == ["proxy"]


async def test_a_wrong_secret_names_the_endpoints_error_not_the_secret(
    provider: OAuthProvider,
) -> None:
    settings = OAuthSettings(provider.token_url, "proxy", "wrong-secret", None, {})
    with pytest.raises(TokenUnavailable, match="HTTP 401 invalid_client") as caught:
        await fetch_token(settings, 5.0)
    assert "wrong-secret" not in str(caught.value)
    assert provider.issued()[0].expiry is None


async def test_an_unreachable_endpoint_says_so() -> None:
    settings = OAuthSettings("http://127.0.0.1:1/token", "proxy", "s", None, {})
    with pytest.raises(TokenUnavailable, match="cannot reach the endpoint"):
        await fetch_token(settings, 2.0)
