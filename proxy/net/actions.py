"""What the conversation asks its connection to do: small immutable actions, done in order."""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field

from kafka_policy_proxy.codec.framing import Buffer
from kafka_policy_proxy.proxy.filters.api import HookResult, RequestContext, Verdict
from kafka_policy_proxy.proxy.net.response_order import Owed


@dataclass(frozen=True, slots=True)
class SendToBroker:
    """Write these frames to the broker, in order."""

    data: list[Buffer]


@dataclass(frozen=True, slots=True)
class SendToClient:
    """Write these bytes to the client, in order."""

    data: list[Buffer]


@dataclass(frozen=True, slots=True)
class AwaitDecision:
    """Await the filters' verdict, then feed it to `decided` with this context."""

    ctx: RequestContext
    pending: Awaitable[Verdict]


@dataclass(frozen=True, slots=True)
class AwaitResponse:
    """Await a response hook, then feed its result to `response_ready` (or `response_failed`)."""

    owed: Owed
    pending: Awaitable[HookResult]


@dataclass(frozen=True, slots=True)
class StopReading:
    """A request's decision is pending: read nothing more from the client for now."""


@dataclass(frozen=True, slots=True)
class ResumeReading:
    """The hold is over: read the client again."""


@dataclass(frozen=True, slots=True)
class CloseConnection:
    """Close both sides (writes already made still go out); `reason` None is an orderly close."""

    reason: str | None = None
    details: Mapping[str, object] = field(default_factory=dict)


Action = (
    SendToBroker
    | SendToClient
    | AwaitDecision
    | AwaitResponse
    | StopReading
    | ResumeReading
    | CloseConnection
)
