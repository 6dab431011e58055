"""The consumer protocol's member bytes and the record batch header, read from bytes."""

from __future__ import annotations

import pytest

from kafka_policy_proxy.codec.consumer_protocol import (
    ProtocolError,
    assigned_topics,
    record_time,
    subscribed_topics,
)
from tests.unit.codec.consumer_bytes import assignment, batch, subscription


@pytest.mark.parametrize("version", [0, 1, 3])
def test_a_subscription_names_its_topics(version: int) -> None:
    assert subscribed_topics(subscription(version, "orders", "clicks")) == {"orders", "clicks"}


def test_an_assignment_names_its_topics() -> None:
    assert assigned_topics(assignment(("orders", [0, 2]), ("clicks", []))) == {"orders", "clicks"}
    assert assigned_topics(b"") == frozenset()


@pytest.mark.parametrize("data", [b"\0", subscription(0, "orders")[:7], b"\0\0\x7f\xff\xff\xff"])
def test_truncated_or_absurd_bytes_are_refused(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        subscribed_topics(data)


def test_the_batch_holding_an_offset_dates_it_by_its_first_timestamp() -> None:
    records = batch(0, 5, 1000, 1900) + batch(5, 5, 2000, 2900)
    assert record_time(records, 3) == 1000
    assert record_time(records, 7) == 2000
    assert record_time(records, 10) is None


def test_log_append_time_dates_it_by_the_append_time() -> None:
    assert record_time(batch(0, 3, 1000, 5000, attributes=0x08), 1) == 5000


def test_a_truncated_batch_still_dates_it_by_its_header() -> None:
    assert record_time(batch(10, 50, 7000, 7100)[:80], 30) == 7000
    assert record_time(batch(10, 50, 7000, 7100)[:60], 30) is None


def test_an_offset_before_the_first_batch_cannot_be_dated() -> None:
    assert record_time(batch(10, 5, 1000, 1000), 4) is None
