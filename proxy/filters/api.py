"""The filter protocol: an immutable request context in, a verdict as data out.

As in Kroxylicious, each concern of the proxy is one filter. A filter declares the API keys it
handles; no other request is offered to it. It never touches the connection: what it learns
(a principal from a SASL response) it hands back as data, in a `WithPrincipal` hook result.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from kafka_policy_proxy.codec.header import RequestHeader, request_body_offset


@dataclass(frozen=True, slots=True)
class RequestContext:
    """One request as a filter sees it: who sent it, on which connection, and its frame."""

    connection_id: int
    listener: str
    client_address: str
    # As the broker confirmed it (SASL) or TLS proved it; User:ANONYMOUS until then.
    principal: str
    header: RequestHeader
    frame: bytes  # size prefix included

    @property
    def api_key(self) -> int:
        """The request's API key."""
        return self.header.api_key

    @property
    def api_version(self) -> int:
        """The request's API version."""
        return self.header.api_version

    @property
    def correlation_id(self) -> int:
        """The id the client matches the response by."""
        return self.header.correlation_id

    @property
    def client_id(self) -> str | None:
        """The client id from the request header."""
        return self.header.client_id

    def body_offset(self) -> int:
        """Where the request body starts in `frame`."""
        return request_body_offset(self.frame, self.header)


@dataclass(frozen=True, slots=True)
class WithPrincipal:
    """A response body, and the principal the broker has just authenticated."""

    body: bytes
    principal: str


HookResult = bytes | WithPrincipal
# Takes the broker's response body (after the header); returns the body for the client.
ResponseHook = Callable[[bytes], HookResult | Awaitable[HookResult]]


@dataclass(frozen=True, slots=True)
class Forward:
    """Send the request to the broker as it is."""

    hook: ResponseHook | None = None


@dataclass(frozen=True, slots=True)
class ForwardModified:
    """Send this frame (size prefix included) to the broker instead."""

    frame: bytes
    hook: ResponseHook | None = None


@dataclass(frozen=True, slots=True)
class Answer:
    """The proxy answers with this response body; the broker never sees the request."""

    body: bytes


@dataclass(frozen=True, slots=True)
class Close:
    """Close the client connection; nothing more from it is evaluated."""

    reason: str
    detail: str | None = None


Verdict = Forward | ForwardModified | Answer | Close
VERDICT_TYPES = (Forward, ForwardModified, Answer, Close)


class Filter:
    """One concern of the proxy; subclasses set `api_keys` and implement `on_request`."""

    api_keys: frozenset[int] = frozenset()

    def on_request(self, ctx: RequestContext) -> Verdict | Awaitable[Verdict]:
        """Decide what happens to one request."""
        raise NotImplementedError

    def on_close(self, connection_id: int) -> None:
        """A connection has closed: drop what is kept for it (nothing, by default)."""
