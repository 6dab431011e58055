"""The conversation of one client connection with the proxy, sans-IO: bytes and events in,
actions out.

In the manner of h11's connection state machine, it owns no socket, task or timer. The
connection feeds it what the client and the broker send and what the filters decided, and
carries out the actions it returns (proxy/net/actions.py). It owns:
- framing, with each size checked before anything is buffered;
- the order of the responses owed to the client (proxy/net/response_order.py), proxy-made
  replies included;
- holds: while a request's decision is pending, later requests wait, so the broker sees this
  connection's requests in order;
- acks=0 Produce: forwarded, no response expected;
- streaming: a large response that needs no hook goes to the client as it arrives, and so does
  a large request no filter handles (Produce, mostly), once its header has been checked.
After a close, nothing more is evaluated, from the same read or later.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable

from kafka_policy_proxy.codec.api_versions import supports
from kafka_policy_proxy.codec.errors import CodecError
from kafka_policy_proxy.codec.framing import SIZE, Buffer, FrameSplitter, framed
from kafka_policy_proxy.codec.header import (
    API_VERSIONS,
    PRODUCE,
    RequestHeader,
    peek_request_header,
    produce_acks,
    response_header,
    response_header_size,
)
from kafka_policy_proxy.proxy.filters.api import (
    VERDICT_TYPES,
    Answer,
    Close,
    ForwardModified,
    HookResult,
    RequestContext,
    ResponseHook,
    Verdict,
    WithPrincipal,
)
from kafka_policy_proxy.proxy.filters.chain import FilterChain
from kafka_policy_proxy.proxy.net.actions import (
    Action,
    AwaitDecision,
    AwaitResponse,
    CloseConnection,
    ResumeReading,
    SendToBroker,
    SendToClient,
    StopReading,
)
from kafka_policy_proxy.proxy.net.response_order import OutOfOrder, Owed, ResponseOrder

# The request header up to the client id's length: size, api key, version, correlation id.
_CLIENT_ID_LENGTH = struct.Struct(">h")
_CLIENT_ID_AT = SIZE + 8
# An incomplete request frame is streamed to the broker once this much of it is held: enough
# for any header and a Produce's acks, so it is judged as a whole frame would be.
STREAM_REQUEST_AFTER = 4096
# The reason a request some filter must read whole is refused at its header.
JUDGED_TOO_LARGE = "request too large to judge"


class Conversation:
    """Frames, filters, holds and in-order responses for one client connection."""

    def __init__(
        self,
        chain: FilterChain,
        *,
        connection_id: int,
        listener: str,
        client_address: str,
        principal: str,
        max_frame_bytes: int,
        max_judged_bytes: int | None = None,
        observe: Callable[[int, int], None] | None = None,
    ) -> None:
        self._chain = chain
        self._observe = observe  # told each request's API key and version (metrics)
        self.connection_id = connection_id
        self.listener = listener
        self.client_address = client_address
        self.principal = principal
        self._requests = FrameSplitter(max_frame_bytes)
        # Frames some filter must read whole are buffered whole: this bounds their body size.
        self._max_judged = max_frame_bytes if max_judged_bytes is None else max_judged_bytes
        # What the incomplete request frame is charged: its declared size once it is known to
        # be buffered whole, so the budget is reserved before its body arrives.
        self._reserved = 0
        # Broker responses are trusted for size; only a negative size is an error.
        self._responses = FrameSplitter(2**31 - 1)
        self._order = ResponseOrder()
        self._held: deque[Buffer] = deque()
        self._held_bytes = 0  # in held request frames
        self._holding = True  # until the broker is connected
        self._deciding = False
        self._streaming = 0  # bytes of the current response still to pass straight through
        self._sending = 0  # bytes of the current request still to pass straight to the broker
        self._draining = False
        self.closed = False
        self._to_broker: list[Buffer] = []
        self._to_client: list[Buffer] = []
        self._effects: list[Action] = []

    @property
    def pending_bytes(self) -> int:
        """Bytes of an incomplete request frame held, or still to come of one being streamed."""
        return self._requests.pending + self._sending

    @property
    def sending(self) -> bool:
        """A request is being streamed to the broker: the rest of it must still be read."""
        return self._sending > 0

    @property
    def buffered_bytes(self) -> int:
        """Bytes this conversation holds: partial frames both ways, held requests, queued
        responses."""
        return (
            max(self._requests.pending, self._reserved)
            + self._responses.pending
            + self._held_bytes
            + self._order.queued_bytes
        )

    # --- events ----------------------------------------------------------------------------

    @property
    def streaming(self) -> int:
        """Bytes of the response being streamed still to come from the broker."""
        return 0 if self.closed else self._streaming

    @property
    def to_send(self) -> int:
        """Bytes of the request being streamed still to come from the client."""
        return 0 if self.closed else self._sending

    @property
    def request_rest(self) -> int:
        """Bytes still to come from the client to the end of the request frame it is in, or 0
        at a frame boundary (or before the frame's size has arrived)."""
        if self._sending:
            return self._sending
        return max(self._requests.declared - self._requests.pending, 0)

    @property
    def response_rest(self) -> int:
        """Bytes still to come from the broker to the end of the response frame it is in, or
        0 at a frame boundary (or before the frame's size has arrived)."""
        if self._streaming:
            return self._streaming
        return max(self._responses.declared - self._responses.pending, 0)

    def client_passes(self, size: int) -> bool:
        """Whether a read of `size` bytes from the client lies wholly inside a request being
        streamed, with more of it to come: if so it is counted, and the caller writes it to
        the broker as it is. (The same as `client_data`, without building actions, for the
        bulk of a large Produce.)"""
        if size < self._sending and not self.closed:
            self._sending -= size
            return True
        return False

    def broker_passes(self, size: int) -> bool:
        """Whether a read of `size` bytes from the broker lies wholly inside a response being
        streamed, with more of it to come: if so it is counted, and the caller writes it to
        the client as it is (the bulk of a large Fetch response)."""
        if size < self._streaming and not self.closed:
            self._streaming -= size
            return True
        return False

    def broker_connected(self) -> list[Action]:
        """The broker connection is open: requests held meanwhile go now."""
        self._release()
        self._read_on()
        return self._actions()

    def client_data(self, data: bytes) -> list[Action]:
        """Bytes from the client."""
        if self.closed:
            return []
        view = memoryview(data)
        if self._sending:
            n = min(self._sending, len(view))
            self._to_broker.append(view[:n])
            self._sending -= n
            view = view[n:]
            if self._draining and not self._sending:
                # The request read on past the drain is complete: read nothing after it.
                self._effects.append(StopReading())
                if not self._order.owing:
                    self._close(None)
                return self._actions()
        try:
            frames = self._requests.feed(view)
        except ValueError as exc:
            self._close("bad frame size", detail=str(exc))
            return self._actions()
        for frame in frames:
            if self.closed:
                break
            if self._holding:
                self._held.append(frame)
                self._held_bytes += len(frame)
            else:
                self._request(frame)
        self._read_on()
        return self._actions()

    def decided(self, ctx: RequestContext, verdict: Verdict) -> list[Action]:
        """The filters' verdict on a request that was held for it."""
        if self.closed:
            return []
        self._deciding = False
        self._apply(ctx, verdict)
        self._release()
        self._read_on()
        if not self._deciding and not self.closed:
            self._effects.append(ResumeReading())
        return self._actions()

    def broker_data(self, data: bytes) -> list[Action]:
        """Bytes from the broker."""
        if self.closed:
            return []
        view = memoryview(data)
        while view:
            if self._streaming:
                n = min(self._streaming, len(view))
                self._to_client.append(view[:n])
                self._streaming -= n
                view = view[n:]
                if not self._streaming:
                    self._flush()
                continue
            # A large response that starts here and needs no hook is passed through as it
            # arrives, instead of being buffered and copied whole (Fetch responses, mostly),
            # also behind whole responses in the same read.
            if not self._responses.pending and len(view) >= SIZE + 4:
                size = int.from_bytes(view[:SIZE], "big", signed=True)
                if 0 <= size <= len(view) - SIZE:
                    self._response(view[: SIZE + size])
                    view = view[SIZE + size :]
                    if self.closed:
                        break
                    continue
                if size + SIZE > len(view) and self._order.stream_next(
                    int.from_bytes(view[SIZE : SIZE + 4], "big", signed=True)
                ):
                    self._streaming = size + SIZE
                    continue
            try:
                frames = self._responses.feed(view)
            except ValueError as exc:
                self._close("bad frame size from broker", detail=str(exc))
                break
            for frame in frames:
                if self.closed:
                    break
                self._response(frame)
            break
        return self._actions()

    def response_spliced(self, size: int) -> list[Action]:
        """`size` bytes of the response being streamed went from the broker to the client
        without passing through here (spliced in the kernel)."""
        if self.closed:
            return []
        self._streaming -= size
        if not self._streaming:
            self._flush()
        return self._actions()

    def request_spliced(self, size: int) -> list[Action]:
        """`size` bytes of the request being streamed went from the client to the broker
        without passing through here (spliced in the kernel)."""
        if self.closed:
            return []
        self._sending -= size
        if self._draining and not self._sending:
            # The request read on past the drain is complete: read nothing after it.
            self._effects.append(StopReading())
            if not self._order.owing:
                self._close(None)
        return self._actions()

    def response_ready(self, owed: Owed, result: HookResult) -> list[Action]:
        """An asynchronous response hook has finished."""
        if self.closed:
            return []
        self._fill(owed, result)
        return self._actions()

    def response_failed(self, exc: Exception) -> list[Action]:
        """An asynchronous response hook has failed."""
        if self.closed:
            return []
        self._close("cannot rewrite broker response", detail=str(exc))
        return self._actions()

    def drain(self) -> list[Action]:
        """Shutting down: close once every response owed has been written."""
        self._draining = True
        if not self.closed and not self._order.owing and not self._streaming and not self._sending:
            self._close(None)
        return self._actions()

    def connection_lost(self) -> None:
        """The connection is gone: evaluate nothing more, and tell the filters."""
        self.closed = True
        self._chain.on_close(self.connection_id)

    # --- requests --------------------------------------------------------------------------

    def _request(self, frame: Buffer) -> None:
        try:
            header = _peek(frame)
        except CodecError as exc:
            self._close("malformed request header", detail=str(exc))
            return
        key = header.api_key
        if self._observe is not None:
            self._observe(key, header.api_version)
        if key != API_VERSIONS and not supports(key, header.api_version):
            # A broker closes the connection on an unsupported version; so does the proxy,
            # rather than forward something it cannot check.
            self._close("unsupported API or version", api_key=key, api_version=header.api_version)
            return
        if not self._chain.handles(key):
            self._pass(header, frame, _acks_zero(frame, header))
            return
        if len(frame) - SIZE > self._max_judged:
            self._too_large(key, len(frame) - SIZE)
            return
        ctx = RequestContext(
            self.connection_id,
            self.listener,
            self.client_address,
            self.principal,
            header,
            frame if isinstance(frame, bytes) else frame.tobytes(),
        )
        verdict = self._chain.on_request(ctx)
        if isinstance(verdict, VERDICT_TYPES):
            self._apply(ctx, verdict)
        else:
            # Later requests wait, so the broker sees this connection's requests in order.
            self._holding = self._deciding = True
            self._effects.append(StopReading())
            self._effects.append(AwaitDecision(ctx, verdict))

    def _read_on(self) -> None:
        # The incomplete frame held back: streamed once its header is read and nothing holds
        # the connection (a frame that arrived while it was held goes as soon as the hold
        # ends, not at the next read, which a paused connection may never make); else
        # charged to the memory budget.
        if self._requests.pending >= STREAM_REQUEST_AFTER and not (self._holding or self.closed):
            self._stream_request()
        self._reserved = 0
        if self._requests.pending >= _KEY_END and not self.closed:
            self._reserve()

    def _reserve(self) -> None:
        # An incomplete frame that will be buffered whole (a filter reads it, or streaming it
        # was refused) is charged its declared size; one over the judged limit is refused
        # now, at its header, before its body is buffered (as a broker refuses an oversized
        # frame). A frame still too short to be streamed is charged what it holds.
        declared = self._requests.declared
        key = int.from_bytes(self._requests.head(_KEY_END)[SIZE:], "big", signed=True)
        if self._chain.handles(key):
            if declared - SIZE > self._max_judged:
                self._too_large(key, declared - SIZE)
                return
        elif self._holding or self._requests.pending < STREAM_REQUEST_AFTER:
            return  # it streams once the hold ends: only what it holds is charged
        self._reserved = declared

    def _too_large(self, key: int, size: int) -> None:
        self._close(
            JUDGED_TOO_LARGE,
            api_key=key,
            size=size,
            limit="limits.max_judged_request_bytes",
            max_bytes=self._max_judged,
        )

    def _pass(self, header: RequestHeader, frame: Buffer, acks_zero: bool) -> None:
        # No filter handles it: forwarded untouched, and a response is owed unless acks=0.
        if acks_zero:
            self._to_broker.append(frame)
        else:
            self._forward(header, frame, None)

    def _stream_request(self) -> None:
        # A large request no filter handles goes on as it arrives instead of being buffered
        # whole. A header that does not parse or a version the proxy does not support closes
        # the connection now, as the whole frame would (rather than buffer it first); acks
        # that do not parse in the first bytes wait to be read from the whole frame.
        head = self._requests.head(STREAM_REQUEST_AFTER)
        try:
            header = _peek(head)
        except CodecError as exc:
            self._close("malformed request header", detail=str(exc))
            return
        key = header.api_key
        if self._chain.handles(key):
            return
        if key != API_VERSIONS and not supports(key, header.api_version):
            self._close("unsupported API or version", api_key=key, api_version=header.api_version)
            return
        try:
            acks_zero = header.api_key == PRODUCE and produce_acks(head, header) == 0
        except CodecError:
            return
        if self._observe is not None:
            self._observe(key, header.api_version)
        size, held = self._requests.take()
        self._sending = size - len(held)
        self._pass(header, held, acks_zero)

    def _apply(self, ctx: RequestContext, verdict: Verdict) -> None:
        if isinstance(verdict, Close):
            self._close(verdict.reason, detail=verdict.detail)
        elif isinstance(verdict, Answer):
            h = ctx.header
            reply = framed(
                response_header(h.correlation_id, h.api_key, h.api_version), verdict.body
            )
            self._order.answered(h, reply)
            self._flush()
        else:
            frame = verdict.frame if isinstance(verdict, ForwardModified) else ctx.frame
            self._forward(ctx.header, frame, verdict.hook)

    def _forward(self, header: RequestHeader, frame: Buffer, hook: ResponseHook | None) -> None:
        self._order.forwarded(header, hook)
        self._to_broker.append(frame)

    def _release(self) -> None:
        # Held requests go in order until one of them is held for a decision again.
        self._holding = False
        while self._held and not self._holding and not self.closed:
            frame = self._held.popleft()
            self._held_bytes -= len(frame)
            self._request(frame)

    # --- responses -------------------------------------------------------------------------

    def _response(self, frame: Buffer) -> None:
        correlation_id = int.from_bytes(frame[SIZE : SIZE + 4], "big", signed=True)
        try:
            owed = self._order.from_broker(correlation_id)
        except OutOfOrder as exc:
            self._close(exc.reason, **exc.details)
            return
        if owed.hook is None:
            self._order.complete(owed, frame)
            self._flush()
            return
        try:
            # The body is copied once, for the hook (kio reads bytes): a large Metadata
            # answer costs page faults per copy (docs/benchmarks.md, growth curves).
            inner = memoryview(frame)[SIZE:]
            size = response_header_size(inner, owed.api_key, owed.api_version)
            result = owed.hook(bytes(inner[size:]))
        except (CodecError, ValueError) as exc:
            self._close("cannot rewrite broker response", detail=str(exc))
            return
        owed.header = bytes(inner[:size])
        if isinstance(result, bytes | WithPrincipal):
            self._fill(owed, result)
        else:
            self._effects.append(AwaitResponse(owed, result))

    def _fill(self, owed: Owed, result: HookResult) -> None:
        if isinstance(result, WithPrincipal):
            # Applies to every later request's context.
            self.principal = result.principal
            result = result.body
        header = owed.header
        assert header is not None
        self._order.complete(owed, framed(header, result))
        self._flush()

    def _flush(self) -> None:
        # Nothing may be written into the middle of a response being streamed.
        if self._streaming:
            return
        self._to_client += self._order.ready()
        if self._draining and not self._order.owing and not self._sending:
            self._close(None)

    # --- output ----------------------------------------------------------------------------

    def _close(self, reason: str | None, **details: object) -> None:
        if not self.closed:
            self.closed = True
            self._effects.append(CloseConnection(reason, details))

    def _actions(self) -> list[Action]:
        actions: list[Action] = []
        if self._to_broker:
            actions.append(SendToBroker(self._to_broker))
            self._to_broker = []
        if self._to_client:
            actions.append(SendToClient(self._to_client))
            self._to_client = []
        if self._effects:
            actions += self._effects
            self._effects = []
        return actions


# A frame's API key is known once its first 6 bytes have arrived.
_KEY_END = SIZE + 2


def _peek(frame: Buffer) -> RequestHeader:
    # Only the header is copied out of the frame: a Produce body stays where it was read.
    end = _CLIENT_ID_AT + 2
    if len(frame) >= end:
        end += max(_CLIENT_ID_LENGTH.unpack_from(frame, _CLIENT_ID_AT)[0], 0)
    return peek_request_header(bytes(frame[:end]), SIZE)


def _acks_zero(frame: Buffer, header: RequestHeader) -> bool:
    if header.api_key != PRODUCE:
        return False
    try:
        return produce_acks(frame, header) == 0  # type: ignore[arg-type]
    except CodecError:
        # Let the broker judge a malformed Produce; expect its answer.
        return False
