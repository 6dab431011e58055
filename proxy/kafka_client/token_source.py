"""OAUTHBEARER tokens for the proxy's own connections: fetched, cached, refreshed before expiry.

The client-credentials grant (RFC 6749 section 4.4) is POSTed to the token endpoint, with the
client id and secret in HTTP Basic authentication, as Kafka's ClientCredentialsJwtRetriever
does. A token is refreshed when its refresh time comes (Kafka's sasl.login.refresh.* rules), in
the background as Kafka's refresh thread does, and by any caller that finds it due; a refresh
that fails keeps the current token while it is valid and is retried with backoff; a token past
its expiry is never handed out.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import random
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from kafka_policy_proxy.proxy.kafka_client.oauth import OAuthSettings
from kafka_policy_proxy.proxy.metrics import OAUTH_TOKEN_EXPIRY, OAUTH_TOKEN_FETCHES

log = structlog.get_logger("proxy.kafka_client.token_source")

# A token this close to its expiry is not sent: it could expire on the way to the broker.
EXPIRY_MARGIN_S = 1.0
# Names the proxy in the identity provider's logs.
USER_AGENT = "kafka-policy-proxy"
_MAX_RESPONSE = 1 << 20


class TokenUnavailable(ConnectionError):
    """No valid token: the endpoint refused or failed, and the last token (if any) expired."""


@dataclass(frozen=True)
class Token:
    """A bearer token and the times it is good for (epoch seconds)."""

    value: str
    start: float
    expiry: float


Fetch = Callable[[OAuthSettings, float], Awaitable[Token]]


class TokenSource:
    """Hands out a valid token for `settings`, refreshing it ahead of its expiry."""

    def __init__(
        self,
        settings: OAuthSettings,
        *,
        fetch: Fetch | None = None,
        clock: Callable[[], float] = time.time,
        rand: Callable[[], float] = random.random,
        background: bool = True,
    ) -> None:
        self.settings = settings
        self.rules = settings.refresh
        self._fetch = fetch or fetch_token
        self._clock = clock
        self._rand = rand
        self._token: Token | None = None
        self._refresh_at = 0.0
        self._failures = 0
        self._lock = asyncio.Lock()
        self.last_error: str | None = None
        self._background = background
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def mechanism(self) -> str:
        """The SASL mechanism these tokens are for."""
        return "OAUTHBEARER"

    async def token(self) -> str:
        """A token valid for at least EXPIRY_MARGIN_S more seconds; raises TokenUnavailable."""
        async with self._lock:
            now = self._clock()
            current = self._token
            if now < self._refresh_at:
                if current is not None and self._valid(current, now):
                    return current.value
                if self.last_error is not None:  # backing off: the endpoint is not asked
                    raise TokenUnavailable(self.last_error)
            try:
                fresh = await self._fetch(self.settings, self.rules.timeout_s)
            except TokenUnavailable as exc:
                return self._after_failure(str(exc), now)
            now = self._clock()
            if not self._valid(fresh, now):
                return self._after_failure("the endpoint issued an expired token", now)
            self._token, self._failures, self.last_error = fresh, 0, None
            self._refresh_at = self.rules.refresh_at(fresh.start, fresh.expiry, now, self._rand())
            OAUTH_TOKEN_FETCHES.labels(result="ok").inc()
            OAUTH_TOKEN_EXPIRY.set(fresh.expiry)
            log.info(
                "oauthbearer token fetched",
                endpoint=self.settings.token_endpoint_url,
                valid_s=round(fresh.expiry - now),
                refresh_in_s=round(self._refresh_at - now),
            )
            self._schedule(now)
            return fresh.value

    def close(self) -> None:
        """Stop refreshing in the background."""
        self._background = False
        if self._timer is not None:
            self._timer.cancel()
        for task in self._tasks:
            task.cancel()

    def _schedule(self, now: float) -> None:
        """Refresh at the refresh time even if no connection asks (Kafka's refresh thread)."""
        if not self._background:
            return
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(max(0.0, self._refresh_at - now), self._refresh_now)

    def _refresh_now(self) -> None:
        task = asyncio.get_running_loop().create_task(self._refresh())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _refresh(self) -> None:
        # A failure is counted, logged and rescheduled with backoff by token(); an expired
        # token is then fetched by the next connection that needs one.
        with contextlib.suppress(TokenUnavailable):
            await self.token()

    def _after_failure(self, reason: str, now: float) -> str:
        """Keep a still-valid token and retry later with backoff; else raise."""
        OAUTH_TOKEN_FETCHES.labels(result="error").inc()
        self._failures += 1
        self.last_error = f"OAUTHBEARER token from {self.settings.token_endpoint_url}: {reason}"
        backoff = min(
            self.rules.retry_backoff_s * 2 ** (self._failures - 1), self.rules.retry_backoff_max_s
        )
        current = self._token
        if current is not None and self._valid(current, now):
            self._refresh_at = min(now + backoff, current.expiry - EXPIRY_MARGIN_S)
            log.warning(
                "oauthbearer token refresh failed; the current token stays in use",
                error=self.last_error,
                retry_in_s=backoff,
                expires_in_s=round(current.expiry - now),
            )
            self._schedule(now)
            return current.value
        self._refresh_at = now + backoff
        log.error("oauthbearer token unavailable", error=self.last_error, retry_in_s=backoff)
        raise TokenUnavailable(self.last_error)

    @staticmethod
    def _valid(token: Token, now: float) -> bool:
        return now < token.expiry - EXPIRY_MARGIN_S


async def fetch_token(settings: OAuthSettings, timeout_s: float) -> Token:
    """POST the client-credentials grant to the token endpoint (in a thread: urllib blocks)."""
    return await asyncio.to_thread(_fetch_blocking, settings, timeout_s)


def _fetch_blocking(settings: OAuthSettings, timeout_s: float) -> Token:
    form = {"grant_type": "client_credentials"}
    if settings.scope:
        form["scope"] = settings.scope
    # RFC 6749 section 2.3.1: both parts are form-urlencoded before the Basic encoding.
    basic = ":".join(
        urllib.parse.quote(part, safe="") for part in (settings.client_id, settings.client_secret)
    )
    request = urllib.request.Request(
        settings.token_endpoint_url,
        data=urllib.parse.urlencode(form).encode(),
        headers={
            "Authorization": "Basic " + base64.b64encode(basic.encode()).decode(),
            "Content-Type": "application/x-www-form-urlencoded",
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
        },
        method="POST",
    )
    issued = time.time()
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = response.read(_MAX_RESPONSE)
    except urllib.error.HTTPError as exc:
        detail = _error_detail(exc.read(4096))
        raise TokenUnavailable(f"HTTP {exc.code}{detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise TokenUnavailable(f"cannot reach the endpoint: {reason}") from None
    return parse_token_response(body, issued)


def _error_detail(body: bytes) -> str:
    """An OAuth error response's `error` (and description), never the request's secret."""
    try:
        error = json.loads(body)
    except ValueError:
        return ""
    if not isinstance(error, dict) or "error" not in error:
        return ""
    description = error.get("error_description")
    return f" {error['error']}" + (f": {description}" if description else "")


def parse_token_response(body: bytes, issued: float) -> Token:
    """The token in a token endpoint's JSON answer; its times from the JWT, else `expires_in`."""
    try:
        answer = json.loads(body)
        value = answer["access_token"]
    except (ValueError, KeyError, TypeError):
        raise TokenUnavailable("the answer has no access_token") from None
    if not isinstance(value, str) or not value:
        raise TokenUnavailable("the answer's access_token is not a string")
    claims = jwt_claims(value)
    expiry = claims.get("exp")
    if expiry is None and isinstance(answer.get("expires_in"), (int, float)):
        expiry = issued + answer["expires_in"]
    if not isinstance(expiry, (int, float)) or isinstance(expiry, bool):
        raise TokenUnavailable("neither the token's exp claim nor expires_in says when it expires")
    start = claims.get("iat", issued)
    if not isinstance(start, (int, float)) or isinstance(start, bool):
        start = issued
    return Token(value, float(start), float(expiry))


def jwt_claims(token: str) -> dict[str, object]:
    """The claims of a JWS compact token, unverified (the broker verifies); {} if not a JWT."""
    parts = token.split(".")
    if len(parts) != 3:
        return {}
    try:
        payload = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))
        claims = json.loads(payload)
    except ValueError:
        return {}
    return claims if isinstance(claims, dict) else {}
