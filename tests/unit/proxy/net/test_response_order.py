"""The order of the responses owed to one client, with frames as plain bytes."""

from __future__ import annotations

import pytest

from kafka_policy_proxy.codec.header import RequestHeader
from kafka_policy_proxy.proxy.net.response_order import OutOfOrder, ResponseOrder

LIST_OFFSETS, PRODUCE, CREATE_TOPICS = 2, 0, 19


def header(correlation_id: int, api_key: int = LIST_OFFSETS) -> RequestHeader:
    """A request header with this correlation id (the version does not matter here)."""
    return RequestHeader(api_key, 5, correlation_id, None, 0)


def answer_from_broker(order: ResponseOrder, correlation_id: int) -> bytes:
    """The broker's response to `correlation_id` arrives whole and needs no hook."""
    frame = f"response {correlation_id}".encode()
    order.complete(order.from_broker(correlation_id), frame)
    return frame


def test_broker_responses_go_out_in_request_order() -> None:
    order = ResponseOrder()
    order.forwarded(header(1), None)
    order.forwarded(header(2), None)
    first = answer_from_broker(order, 1)
    assert order.ready() == [first]
    second = answer_from_broker(order, 2)
    assert order.ready() == [second]
    assert not order.owing


def test_a_reply_of_the_proxy_waits_behind_an_earlier_broker_response() -> None:
    order = ResponseOrder()
    order.forwarded(header(1), None)
    order.answered(header(2, CREATE_TOPICS), b"denied")
    order.forwarded(header(3), None)
    assert order.ready() == []
    assert order.queued_bytes == len(b"denied")
    first = answer_from_broker(order, 1)
    assert order.ready() == [first, b"denied"]
    assert order.owing  # response 3 is still at the broker
    third = answer_from_broker(order, 3)
    assert order.ready() == [third]
    assert order.queued_bytes == 0


def test_an_acks_zero_produce_owes_nothing_and_holds_nothing_back() -> None:
    order = ResponseOrder()
    order.forwarded(header(1), None)
    # Request 2 is a Produce with acks=0: forwarded, never entered, no response expected.
    order.answered(header(3, CREATE_TOPICS), b"denied")
    first = answer_from_broker(order, 1)
    assert order.ready() == [first, b"denied"]
    assert not order.owing
    with pytest.raises(OutOfOrder, match="nobody asked for"):
        order.from_broker(2)


def test_a_response_other_than_the_one_owed_next_is_out_of_order() -> None:
    order = ResponseOrder()
    order.forwarded(header(1), None)
    order.forwarded(header(2), None)
    with pytest.raises(OutOfOrder) as failure:
        order.from_broker(2)
    assert failure.value.reason == "broker response out of order"
    assert failure.value.details == {"expected": 1, "got": 2}


def test_a_response_being_rewritten_holds_back_the_ones_after_it() -> None:
    order = ResponseOrder()
    rewritten = order.forwarded(header(1, CREATE_TOPICS), lambda body: body)
    order.forwarded(header(2), None)
    assert order.from_broker(1) is rewritten
    second = answer_from_broker(order, 2)
    assert order.ready() == []
    assert order.queued_bytes == len(second)
    order.complete(rewritten, b"rewritten")
    assert rewritten.hook is None
    assert order.ready() == [b"rewritten", second]


def test_only_the_response_owed_next_without_a_hook_is_streamed() -> None:
    order = ResponseOrder()
    order.answered(header(1, CREATE_TOPICS), b"denied")
    order.forwarded(header(2), None)
    # A reply of the proxy is owed first: the broker's response must wait its turn.
    assert not order.stream_next(2)
    assert order.ready() == [b"denied"]
    assert not order.stream_next(9)  # not the response expected
    assert order.stream_next(2)
    assert not order.owing
    order.forwarded(header(3, CREATE_TOPICS), lambda body: body)
    assert not order.stream_next(3)  # its body must be rewritten whole
