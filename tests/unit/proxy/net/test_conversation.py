"""A client's conversation without a socket: bytes and events in, actions out, in order."""

from __future__ import annotations

import inspect
import struct
from collections.abc import Callable, Generator
from typing import Any, cast

from harness.messages import build
from kafka_policy_proxy.codec.framing import framed
from kafka_policy_proxy.codec.header import response_header
from kafka_policy_proxy.codec.registry import request_class
from kafka_policy_proxy.proxy.filters.api import (
    Answer,
    Close,
    Filter,
    Forward,
    RequestContext,
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
from kafka_policy_proxy.proxy.net.conversation import STREAM_REQUEST_AFTER, Conversation
from tests.unit.proxy.contexts import request_frame

LIST_OFFSETS, FETCH, CREATE_TOPICS, SASL_AUTHENTICATE = 2, 1, 19, 36


class Pending:
    """A decision still to come: the test feeds it back with `decided`."""

    def __await__(self) -> Generator[Any, None, Verdict]:
        raise AssertionError("the conversation never awaits")


class Scripted(Filter):
    """Handles one API key as the test says; records what it saw."""

    def __init__(self, api_key: int, decide: Callable[[RequestContext], Any]) -> None:
        self.api_keys = frozenset({api_key})
        self._decide = decide
        self.seen: list[RequestContext] = []
        self.closed: list[int] = []

    def on_request(self, ctx: RequestContext) -> Any:
        self.seen.append(ctx)
        return self._decide(ctx)

    def on_close(self, connection_id: int) -> None:
        self.closed.append(connection_id)


def conversation(
    *filters: Filter, connected: bool = True, max_frame_bytes: int = 4096
) -> Conversation:
    p = Conversation(
        FilterChain(filters),
        connection_id=7,
        listener="bootstrap",
        client_address="10.0.0.7:50000",
        principal="User:ANONYMOUS",
        max_frame_bytes=max_frame_bytes,
    )
    if connected:
        assert p.broker_connected() == []
    return p


def request(api_key: int, correlation_id: int) -> bytes:
    version = {LIST_OFFSETS: 5, FETCH: 12, CREATE_TOPICS: 7, SASL_AUTHENTICATE: 2}[api_key]
    return request_frame(api_key, version, correlation_id=correlation_id)


def response(api_key: int, correlation_id: int, body: bytes = b"ok") -> bytes:
    version = {LIST_OFFSETS: 5, FETCH: 12, CREATE_TOPICS: 7, SASL_AUTHENTICATE: 2}[api_key]
    return framed(response_header(correlation_id, api_key, version), body)


def to_broker(actions: list[Action]) -> bytes:
    return b"".join(bytes(d) for a in actions if isinstance(a, SendToBroker) for d in a.data)


def to_client(actions: list[Action]) -> bytes:
    return b"".join(bytes(d) for a in actions if isinstance(a, SendToClient) for d in a.data)


def correlation_ids(stream: bytes) -> list[int]:
    ids, pos = [], 0
    while pos < len(stream):
        size, correlation_id = struct.unpack_from(">ii", stream, pos)
        ids.append(correlation_id)
        pos += 4 + size
    return ids


def test_pipelined_allowed_and_denied_requests_are_answered_in_order() -> None:
    deny = Scripted(CREATE_TOPICS, lambda ctx: Answer(b"denied"))
    p = conversation(deny)
    actions = p.client_data(
        request(LIST_OFFSETS, 1) + request(CREATE_TOPICS, 2) + request(LIST_OFFSETS, 3)
    )
    # The denied request never reaches the broker; its reply waits behind response 1.
    assert to_broker(actions) == request(LIST_OFFSETS, 1) + request(LIST_OFFSETS, 3)
    assert to_client(actions) == b""
    out = to_client(p.broker_data(response(LIST_OFFSETS, 1) + response(LIST_OFFSETS, 3)))
    assert correlation_ids(out) == [1, 2, 3]
    assert out == (
        response(LIST_OFFSETS, 1)
        + framed(response_header(2, CREATE_TOPICS, 7), b"denied")
        + response(LIST_OFFSETS, 3)
    )


def test_later_requests_wait_while_a_decision_is_pending() -> None:
    pending = Pending()
    slow = Scripted(CREATE_TOPICS, lambda ctx: pending)
    p = conversation(slow)
    actions = p.client_data(request(CREATE_TOPICS, 1) + request(LIST_OFFSETS, 2))
    assert to_broker(actions) == b""
    [stop, wait] = actions
    assert isinstance(stop, StopReading)
    assert isinstance(wait, AwaitDecision) and wait.ctx.correlation_id == 1
    assert inspect.iscoroutine(wait.pending)
    wait.pending.close()  # the chain's wrapper around `pending`; the test decides instead
    # More bytes from the same client wait too.
    assert p.client_data(request(LIST_OFFSETS, 3)) == []
    actions = p.decided(wait.ctx, Forward())
    assert to_broker(actions) == (
        request(CREATE_TOPICS, 1) + request(LIST_OFFSETS, 2) + request(LIST_OFFSETS, 3)
    )
    assert isinstance(actions[-1], ResumeReading)


def test_requests_before_the_broker_is_connected_are_held_in_order() -> None:
    p = conversation(connected=False)
    assert p.client_data(request(LIST_OFFSETS, 1) + request(LIST_OFFSETS, 2)) == []
    assert to_broker(p.broker_connected()) == request(LIST_OFFSETS, 1) + request(LIST_OFFSETS, 2)


def test_acks_zero_produce_is_forwarded_and_no_response_expected() -> None:
    p = conversation()
    produce = build(request_class(0, 9), transactional_id=None, acks=0, timeout=100, topic_data=())
    frames = b"".join(request_frame(0, 9, produce, correlation_id=i) for i in (1, 2))
    actions = p.client_data(frames + request(LIST_OFFSETS, 3))
    assert to_broker(actions) == frames + request(LIST_OFFSETS, 3)
    # The next response the broker sends is for request 3, not for a Produce.
    assert to_client(p.broker_data(response(LIST_OFFSETS, 3))) == response(LIST_OFFSETS, 3)


def test_a_client_closing_in_the_middle_of_a_frame() -> None:
    watcher = Scripted(CREATE_TOPICS, lambda ctx: Forward())
    p = conversation(watcher)
    whole = request(CREATE_TOPICS, 1)
    assert p.client_data(whole[:9]) == []
    assert p.pending_bytes == 9
    p.connection_lost()
    assert p.client_data(whole[9:]) == []
    assert watcher.seen == []
    assert watcher.closed == [7]


def test_a_streamed_large_response_keeps_a_queued_reply_behind_it() -> None:
    answer = Scripted(CREATE_TOPICS, lambda ctx: Answer(b"reply"))
    p = conversation(answer)
    p.client_data(request(FETCH, 1) + request(CREATE_TOPICS, 2))
    big = response(FETCH, 1, bytes(range(256)) * 64)
    first, middle, last = big[:1000], big[1000:9000], big[9000:]
    # The first piece starts a response that needs no hook: it goes through as it arrives.
    assert to_client(p.broker_data(first)) == first
    assert to_client(p.broker_data(middle)) == middle
    # The reply is queued behind the stream and goes right after its last byte.
    reply = framed(response_header(2, CREATE_TOPICS, 7), b"reply")
    assert to_client(p.broker_data(last)) == last + reply


def test_a_closed_connection_evaluates_nothing_more_from_the_same_read() -> None:
    watcher = Scripted(CREATE_TOPICS, lambda ctx: Forward())
    p = conversation(watcher)
    malformed = framed(b"\x00\x03")
    actions = p.client_data(malformed + request(CREATE_TOPICS, 1) + request(LIST_OFFSETS, 2))
    assert actions == [CloseConnection("malformed request header", actions[0].details)]  # type: ignore[union-attr]
    assert watcher.seen == []
    assert p.client_data(request(CREATE_TOPICS, 3)) == []
    assert watcher.seen == []


def test_a_close_verdict_stops_the_rest_of_the_read() -> None:
    refuse = Scripted(CREATE_TOPICS, lambda ctx: Close("refused", "no"))
    p = conversation(refuse)
    actions = p.client_data(
        request(LIST_OFFSETS, 1) + request(CREATE_TOPICS, 2) + request(CREATE_TOPICS, 3)
    )
    assert to_broker(actions) == request(LIST_OFFSETS, 1)
    assert [a for a in actions if isinstance(a, CloseConnection)] == [
        CloseConnection("refused", {"detail": "no"})
    ]
    assert [ctx.correlation_id for ctx in refuse.seen] == [2]


def test_a_principal_a_hook_hands_back_applies_to_later_requests() -> None:
    def learn(ctx: RequestContext) -> Forward:
        return Forward(lambda body: WithPrincipal(body, "User:alice"))

    sasl = Scripted(SASL_AUTHENTICATE, learn)
    p = conversation(sasl)
    p.client_data(request(SASL_AUTHENTICATE, 1))
    assert to_client(p.broker_data(response(SASL_AUTHENTICATE, 1, b"\x00"))) == response(
        SASL_AUTHENTICATE, 1, b"\x00"
    )
    p.client_data(request(SASL_AUTHENTICATE, 2))
    assert [ctx.principal for ctx in sasl.seen] == ["User:ANONYMOUS", "User:alice"]


def test_an_asynchronous_hook_holds_later_responses_until_it_is_ready() -> None:
    pending = Pending()
    hooked = Scripted(CREATE_TOPICS, lambda ctx: Forward(lambda body: cast(Any, pending)))
    p = conversation(hooked)
    p.client_data(request(CREATE_TOPICS, 1) + request(LIST_OFFSETS, 2))
    actions = p.broker_data(response(CREATE_TOPICS, 1, b"\x00raw") + response(LIST_OFFSETS, 2))
    [wait] = actions
    assert isinstance(wait, AwaitResponse) and wait.pending is cast(Any, pending)
    out = to_client(p.response_ready(wait.owed, b"\x00new"))
    assert out == response(CREATE_TOPICS, 1, b"\x00new") + response(LIST_OFFSETS, 2)


def test_a_response_out_of_order_closes_the_connection() -> None:
    p = conversation()
    p.client_data(request(LIST_OFFSETS, 1))
    [close] = p.broker_data(response(LIST_OFFSETS, 9))
    assert isinstance(close, CloseConnection) and close.reason == "broker response out of order"


def test_draining_closes_once_every_response_owed_is_written() -> None:
    p = conversation()
    p.client_data(request(LIST_OFFSETS, 1))
    assert p.drain() == []
    actions = p.broker_data(response(LIST_OFFSETS, 1))
    assert to_client(actions) == response(LIST_OFFSETS, 1)
    assert actions[-1] == CloseConnection(None)


def test_an_oversized_frame_is_refused_before_it_is_buffered() -> None:
    p = conversation()
    [close] = p.client_data(struct.pack(">i", 4097))
    assert isinstance(close, CloseConnection) and close.reason == "bad frame size"
    assert p.pending_bytes == 0


def test_buffered_bytes_counts_partial_frames_held_requests_and_queued_replies() -> None:
    pending = Pending()
    slow = Scripted(CREATE_TOPICS, lambda ctx: pending)
    p = conversation(slow, Scripted(LIST_OFFSETS, lambda ctx: Answer(b"x" * 100)))
    held, partial = request(LIST_OFFSETS, 2), request(FETCH, 3)
    actions = p.client_data(request(CREATE_TOPICS, 1) + held + partial[:10])
    wait = next(a for a in actions if isinstance(a, AwaitDecision))
    assert inspect.iscoroutine(wait.pending)
    wait.pending.close()
    assert p.buffered_bytes == len(held) + 10
    # The decision releases the held request: its proxy-made reply waits behind response 1.
    p.decided(wait.ctx, Forward())
    reply = framed(response_header(2, LIST_OFFSETS, 5), b"x" * 100)
    assert p.buffered_bytes == len(reply) + 10
    out = p.broker_data(response(CREATE_TOPICS, 1) + response(FETCH, 3)[:7])
    assert to_client(out) == response(CREATE_TOPICS, 1) + reply
    assert p.buffered_bytes == 10 + 7
    p.client_data(partial[10:])
    p.broker_data(response(FETCH, 3)[7:])
    assert p.buffered_bytes == 0


def large_produce(correlation_id: int, acks: int = -1, size: int = 100_000) -> bytes:
    """A Produce frame padded to `size` bytes after its acks (records the proxy never reads)."""
    produce = build(
        request_class(0, 9), transactional_id=None, acks=acks, timeout=100, topic_data=()
    )
    frame = request_frame(0, 9, produce, correlation_id=correlation_id)
    return framed(frame[4:], bytes(size))


def streamed(*filters: Filter) -> Conversation:
    return conversation(*filters, max_frame_bytes=1 << 20)


def test_a_large_request_no_filter_handles_goes_to_the_broker_as_it_arrives() -> None:
    p = streamed()
    big = large_produce(1)
    pieces = [
        big[: STREAM_REQUEST_AFTER + 10],
        big[STREAM_REQUEST_AFTER + 10 : 60_000],
        big[60_000:],
    ]
    sent = b""
    for piece in pieces:
        sent += to_broker(p.client_data(piece))
        assert sent == big[: len(sent)] and len(sent) > 0
        assert p.buffered_bytes == 0  # nothing of it is held back
    assert sent == big
    assert p.pending_bytes == 0
    out = p.broker_data(response(LIST_OFFSETS, 1))  # the response owed is the Produce's
    assert correlation_ids(to_client(out)) == [1]


def test_the_start_of_a_large_request_waits_until_its_header_can_be_judged() -> None:
    p = streamed()
    big = large_produce(1)
    assert p.client_data(big[: STREAM_REQUEST_AFTER - 1]) == []
    assert p.pending_bytes == STREAM_REQUEST_AFTER - 1
    assert to_broker(p.client_data(big[STREAM_REQUEST_AFTER - 1 :])) == big


def test_a_large_request_a_filter_handles_is_judged_whole() -> None:
    watcher = Scripted(0, lambda ctx: Forward())
    p = streamed(watcher)
    big = large_produce(1)
    assert to_broker(p.client_data(big[:50_000])) == b""
    assert to_broker(p.client_data(big[50_000:])) == big
    [ctx] = watcher.seen
    assert bytes(ctx.frame) == big


def test_a_streamed_acks_zero_produce_expects_no_response_and_the_next_request_follows() -> None:
    p = streamed()
    big = large_produce(1, acks=0)
    assert to_broker(p.client_data(big[:10_000])) == big[:10_000]
    actions = p.client_data(big[10_000:] + request(LIST_OFFSETS, 2))
    assert to_broker(actions) == big[10_000:] + request(LIST_OFFSETS, 2)
    assert to_client(p.broker_data(response(LIST_OFFSETS, 2))) == response(LIST_OFFSETS, 2)


def test_a_large_request_behind_a_pending_decision_is_held_not_streamed() -> None:
    pending = Pending()
    p = streamed(Scripted(CREATE_TOPICS, lambda ctx: pending))
    big = large_produce(2)
    actions = p.client_data(request(CREATE_TOPICS, 1) + big[:20_000])
    wait = next(a for a in actions if isinstance(a, AwaitDecision))
    assert inspect.iscoroutine(wait.pending)
    wait.pending.close()
    assert to_broker(actions) == b""
    # Once the hold is over, the large request streams at once, and the next read with it.
    assert to_broker(p.decided(wait.ctx, Forward())) == request(CREATE_TOPICS, 1) + big[:20_000]
    assert to_broker(p.client_data(big[20_000:30_000])) == big[20_000:30_000]


def test_draining_in_the_middle_of_a_streamed_request_reads_it_to_its_end_then_stops() -> None:
    p = streamed()
    big = large_produce(1)
    p.client_data(big[:10_000])
    assert p.sending
    assert p.drain() == []
    actions = p.client_data(big[10_000:] + request(LIST_OFFSETS, 2))
    # The rest of the request goes; what follows it is not read as a new request.
    assert to_broker(actions) == big[10_000:]
    assert any(isinstance(a, StopReading) for a in actions)
    actions = p.broker_data(response(LIST_OFFSETS, 1))
    assert correlation_ids(to_client(actions)) == [1]
    assert actions[-1] == CloseConnection(None)


def test_reads_inside_a_streamed_request_pass_as_they_are_until_its_last_byte() -> None:
    p = streamed()
    big = large_produce(1)
    assert to_broker(p.client_data(big[:10_000])) == big[:10_000]
    assert p.client_passes(50_000)  # the caller writes big[10_000:60_000] as it is
    # A read that reaches the request's end (or goes past it) goes through client_data.
    assert not p.client_passes(len(big) - 60_000)
    actions = p.client_data(big[60_000:] + request(LIST_OFFSETS, 2))
    assert to_broker(actions) == big[60_000:] + request(LIST_OFFSETS, 2)
    out = p.broker_data(response(LIST_OFFSETS, 1) + response(LIST_OFFSETS, 2))
    assert correlation_ids(to_client(out)) == [1, 2]


def test_reads_inside_a_streamed_response_pass_as_they_are_until_its_last_byte() -> None:
    answer = Scripted(CREATE_TOPICS, lambda ctx: Answer(b"reply"))
    p = conversation(answer)
    p.client_data(request(FETCH, 1) + request(CREATE_TOPICS, 2))
    big = response(FETCH, 1, bytes(range(256)) * 64)
    assert not p.broker_passes(1000)  # nothing is being streamed yet
    assert to_client(p.broker_data(big[:1000])) == big[:1000]
    assert p.broker_passes(8000)
    assert not p.broker_passes(len(big) - 9000)
    reply = framed(response_header(2, CREATE_TOPICS, 7), b"reply")
    assert to_client(p.broker_data(big[9000:])) == big[9000:] + reply


def test_nothing_passes_once_the_connection_is_closed() -> None:
    p = streamed()
    p.client_data(large_produce(1)[:10_000])
    p.connection_lost()
    assert not p.client_passes(100)


def test_a_frame_read_whole_is_charged_its_declared_size_from_its_header() -> None:
    # The budget is reserved before the body arrives, so a frame that does not fit stops the
    # connection after one read instead of once it is held (issue 31).
    p = streamed(Scripted(0, lambda ctx: Forward()))
    big = large_produce(1)
    assert p.client_data(big[:5]) == []
    assert p.buffered_bytes == 5  # its API key is not known yet
    assert p.client_data(big[5:1000]) == []
    assert p.buffered_bytes == len(big)
    assert to_broker(p.client_data(big[1000:])) == big
    assert p.buffered_bytes == 0


def test_a_frame_too_short_to_stream_yet_is_charged_what_it_holds() -> None:
    p = streamed()
    big = large_produce(1)
    assert p.client_data(big[:1000]) == []
    assert p.buffered_bytes == 1000


def test_a_judged_frame_over_its_limit_is_refused_at_its_header() -> None:
    p = Conversation(
        FilterChain([Scripted(0, lambda ctx: Forward())]),
        connection_id=7,
        listener="bootstrap",
        client_address="10.0.0.7:50000",
        principal="User:ANONYMOUS",
        max_frame_bytes=1 << 20,
        max_judged_bytes=60_000,
    )
    assert p.broker_connected() == []
    big = large_produce(1)  # 100,000 bytes and more
    [close] = p.client_data(big[:6])
    assert close == CloseConnection(
        "request too large to judge",
        {
            "api_key": 0,
            "size": len(big) - 4,
            "limit": "limits.max_judged_request_bytes",
            "max_bytes": 60_000,
        },
    )
    assert p.buffered_bytes == 6  # nothing more was taken
    assert p.client_data(big[6:]) == []


def test_a_large_frame_of_an_unsupported_version_closes_once_its_header_is_read() -> None:
    # Rather than buffer the whole frame first, only to refuse it then.
    p = streamed()
    # Produce v0, which Kafka 4 dropped: a v1 header (key, version, correlation id, client id)
    frame = framed(struct.pack(">hhih", 0, 0, 1, 1) + b"t", bytes(500_000))
    [close] = p.client_data(frame[:STREAM_REQUEST_AFTER])
    assert isinstance(close, CloseConnection)
    assert close.reason == "unsupported API or version"


def test_a_large_request_read_before_the_broker_is_connected_streams_once_it_is() -> None:
    # It is charged what it holds, not its declared size, while it waits: else many such
    # connections would spend the budget on reservations and stall, with every other client
    # paused behind them (issue 31's partial-frame flood); and it must go on when the broker
    # connects, since a connection paused for memory may read nothing more to trigger it.
    p = conversation(connected=False, max_frame_bytes=1 << 20)
    big = large_produce(1)
    assert p.client_data(big[:20_000]) == []
    assert p.buffered_bytes == 20_000
    assert to_broker(p.broker_connected()) == big[:20_000]
    assert p.buffered_bytes == 0 and p.sending


def test_the_rest_of_each_frame_is_counted_both_ways() -> None:
    # What reads sized to frame boundaries (net.splice) ask for: bytes to the end of the
    # current frame, 0 at a boundary.
    p = streamed()
    assert p.request_rest == p.response_rest == 0
    big = large_produce(1)
    p.client_data(big[:2])  # not even its size yet
    assert p.request_rest == 0
    p.client_data(big[2:100])  # held: its size is known
    assert p.request_rest == len(big) - 100
    p.client_data(big[100 : STREAM_REQUEST_AFTER + 10])  # streamed from here
    assert p.request_rest == len(big) - STREAM_REQUEST_AFTER - 10
    p.client_data(big[STREAM_REQUEST_AFTER + 10 :] + request(FETCH, 2)[:10])
    assert p.request_rest == len(request(FETCH, 2)) - 10
    p.client_data(request(FETCH, 2)[10:])
    assert p.request_rest == 0
    answer = response(LIST_OFFSETS, 1)
    p.broker_data(answer[:6])  # a small response, held until whole
    assert p.response_rest == len(answer) - 6
    p.broker_data(answer[6:])
    assert p.response_rest == 0
    fetched = response(FETCH, 2, bytes(50_000))
    p.broker_data(fetched[:1000])  # a large one, streamed
    assert p.response_rest == len(fetched) - 1000
    p.broker_data(fetched[1000:])
    assert p.response_rest == 0
