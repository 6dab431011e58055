"""Request contexts and frames for driving filters and a conversation without a socket."""

from __future__ import annotations

import inspect
from typing import Any

from kafka_policy_proxy.codec.framing import framed
from kafka_policy_proxy.codec.header import peek_request_header, request_header
from kafka_policy_proxy.codec.registry import encode
from kafka_policy_proxy.proxy.filters.api import RequestContext


def request_frame(
    api_key: int, version: int, message: Any = None, *, correlation_id: int = 1
) -> bytes:
    """A request frame (size prefix included) with client id `t`."""
    body = b"" if message is None else encode(message)
    return framed(request_header(api_key, version, correlation_id, "t"), body)


def context(
    api_key: int,
    version: int,
    message: Any = None,
    *,
    connection_id: int = 1,
    principal: str = "User:ANONYMOUS",
    correlation_id: int = 1,
) -> RequestContext:
    """The context a filter gets for this request."""
    frame = request_frame(api_key, version, message, correlation_id=correlation_id)
    return context_of(frame, connection_id=connection_id, principal=principal)


def context_of(
    frame: bytes, *, connection_id: int = 1, principal: str = "User:ANONYMOUS"
) -> RequestContext:
    """The context a filter gets for this frame."""
    header = peek_request_header(frame, 4)
    return RequestContext(connection_id, "bootstrap", "10.0.0.7:50000", principal, header, frame)


async def settle(result: Any) -> Any:
    """The value of a filter's or hook's result, awaited if it is asynchronous."""
    return await result if inspect.isawaitable(result) else result
