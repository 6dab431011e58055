"""The responses owed to one client, in the order of its requests (Kroxylicious's ResponseOrderer).

Kafka clients match responses to requests by correlation id, in order. So a reply the proxy
makes itself waits behind every earlier response still at the broker, and a response the broker
sends is checked to be the one expected next. An acks=0 Produce is owed nothing and never
enters the queue. Sans-IO: frames in, frames ready for the client out.
"""

from __future__ import annotations

from collections import deque

from kafka_policy_proxy.codec.framing import Buffer
from kafka_policy_proxy.codec.header import RequestHeader
from kafka_policy_proxy.proxy.filters.api import ResponseHook


class Owed:
    """A response owed to the client: filled in when the broker (or the proxy) has it."""

    __slots__ = ("api_key", "api_version", "correlation_id", "frame", "header", "hook")

    def __init__(
        self,
        correlation_id: int,
        api_key: int,
        api_version: int,
        hook: ResponseHook | None,
        frame: Buffer | None = None,
    ) -> None:
        self.correlation_id = correlation_id
        self.api_key = api_key
        self.api_version = api_version
        self.hook = hook  # rewrites the broker's response body before it goes out
        self.frame = frame  # the whole response frame, once it is ready to go out
        self.header: Buffer | None = None  # the broker's response header, while a hook runs


class OutOfOrder(Exception):
    """The broker sent a response that is not the one owed next: the connection is unusable."""

    def __init__(self, reason: str, **details: object) -> None:
        super().__init__(reason)
        self.reason = reason
        self.details = details


class ResponseOrder:
    """One queue of the responses owed to a client, proxy-made replies included."""

    def __init__(self) -> None:
        self._owed: deque[Owed] = deque()  # in request order
        self._at_broker: deque[Owed] = deque()  # the owed responses the broker will send
        self.queued_bytes = 0  # in responses ready but waiting for their turn to go out

    @property
    def owing(self) -> bool:
        """Whether any response is still owed to the client."""
        return bool(self._owed)

    def forwarded(self, header: RequestHeader, hook: ResponseHook | None) -> Owed:
        """A request went to the broker: its response is owed, after every earlier one."""
        owed = Owed(header.correlation_id, header.api_key, header.api_version, hook)
        self._owed.append(owed)
        self._at_broker.append(owed)
        return owed

    def answered(self, header: RequestHeader, reply: Buffer) -> None:
        """The proxy answered a request itself: the reply goes once every earlier one has."""
        owed = Owed(header.correlation_id, header.api_key, header.api_version, None, reply)
        self._owed.append(owed)
        self.queued_bytes += len(reply)

    def from_broker(self, correlation_id: int) -> Owed:
        """The owed response the broker's next response answers; OutOfOrder if it is not."""
        if not self._at_broker:
            raise OutOfOrder("broker sent a response nobody asked for")
        owed = self._at_broker.popleft()
        if correlation_id != owed.correlation_id:
            raise OutOfOrder(
                "broker response out of order", expected=owed.correlation_id, got=correlation_id
            )
        return owed

    def complete(self, owed: Owed, frame: Buffer) -> None:
        """The response is ready as `frame`; it goes out in its turn (see `ready`)."""
        owed.frame = frame
        owed.hook = owed.header = None
        self.queued_bytes += len(frame)

    def stream_next(self, correlation_id: int) -> bool:
        """Whether the broker response starting now may go to the client as it arrives: it is
        owed next, needs no hook and is the one expected. If so, it leaves the queue."""
        if not self._at_broker or not self._owed:
            return False
        owed = self._at_broker[0]
        if owed.hook is not None or self._owed[0] is not owed:
            return False
        if correlation_id != owed.correlation_id:
            return False
        self._at_broker.popleft()
        self._owed.popleft()
        return True

    def ready(self) -> list[Buffer]:
        """The frames whose turn has come, in order; they leave the queue."""
        out: list[Buffer] = []
        owed = self._owed
        while owed and owed[0].frame is not None:
            frame = owed.popleft().frame
            assert frame is not None
            self.queued_bytes -= len(frame)
            out.append(frame)
        return out
