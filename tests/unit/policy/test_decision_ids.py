"""Decision ids: UUIDv7 text that sorts by the time minted, unique, with its time readable."""

from __future__ import annotations

import multiprocessing
import re
import time
import uuid
from datetime import UTC, datetime

import pytest

from kafka_policy_proxy.policy import decision_ids
from kafka_policy_proxy.policy.decision_ids import (
    cite,
    decision_id_at,
    decision_time,
    is_time_ordered,
    new_decision_id,
    parse_decision_id,
)

CANONICAL = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


@pytest.fixture(autouse=True)
def own_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """A clock of this test's own: a faked time must not outlive the test in later ids."""
    monkeypatch.setattr(decision_ids, "_clock", decision_ids._Clock())


def test_ids_are_canonical_uuid7_text_that_sorts_in_the_order_minted() -> None:
    ids = [new_decision_id() for _ in range(100_000)]
    assert all(CANONICAL.match(i) for i in ids)
    assert len(set(ids)) == len(ids)
    assert sorted(ids) == ids  # as text, as the lake and a `sort` compare them
    parsed = uuid.UUID(ids[0])
    assert parsed.version == 7 and parsed.variant == uuid.RFC_4122


def test_within_one_millisecond_and_when_the_clock_steps_back_the_order_holds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1_800_000_000_000 * 1_000_000]
    monkeypatch.setattr(decision_ids.time, "time_ns", lambda: now[0])
    same_ms = [new_decision_id() for _ in range(1000)]
    now[0] -= 5_000 * 1_000_000  # NTP steps the clock back 5 s
    stepped_back = [new_decision_id() for _ in range(10)]
    ids = same_ms + stepped_back
    assert sorted(ids) == ids and len(set(ids)) == len(ids)
    # The last millisecond is kept until the clock passes it again.
    assert {decision_time(i) for i in ids} == {datetime.fromtimestamp(1_800_000_000, UTC)}
    now[0] += 6_000 * 1_000_000
    later = new_decision_id()
    assert later > ids[-1]
    assert decision_time(later) == datetime.fromtimestamp(1_800_000_001, UTC)


def test_a_full_counter_moves_on_to_the_next_millisecond(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decision_ids.time, "time_ns", lambda: 1_800_000_000_000 * 1_000_000)
    first = new_decision_id()
    monkeypatch.setattr(decision_ids._clock, "counter", (1 << 42) - 1)
    after = new_decision_id()
    assert after > first
    assert decision_time(after).timestamp() * 1000 == 1_800_000_000_001


def test_the_time_read_back_is_when_it_was_minted_to_the_millisecond() -> None:
    before = time.time()
    minted = new_decision_id()
    after = time.time()
    assert before - 0.001 <= decision_time(minted).timestamp() <= after
    assert decision_time(uuid.UUID(minted)) == decision_time(minted.upper().replace("-", ""))


def test_an_id_stamped_at_a_given_time_carries_it_and_sorts_by_it() -> None:
    # How a generator of past records (harness/audit_traffic.py) stamps its own times.
    stamped = [
        decision_id_at(ms, counter, 0xFFFF_FFFF)
        for ms, counter in (
            (1_800_000_000_000, (1 << 42) - 1),
            (1_800_000_000_001, 0),
            (1_800_000_000_001, 1),
        )
    ]
    assert all(CANONICAL.match(i) for i in stamped)
    assert sorted(stamped) == stamped and len(set(stamped)) == 3
    assert decision_time(stamped[0]) == datetime.fromtimestamp(1_800_000_000, UTC)
    assert decision_time(stamped[1]).timestamp() * 1000 == 1_800_000_000_001


def test_ids_are_read_in_either_text_form_and_anything_else_is_refused() -> None:
    minted = new_decision_id()
    assert parse_decision_id(minted) == parse_decision_id(minted.replace("-", "").upper())
    legacy = uuid.uuid4().hex  # the 32 hex digits of records written before ids had a time
    assert not is_time_ordered(parse_decision_id(legacy))
    with pytest.raises(ValueError, match="carries no time"):
        decision_time(legacy)
    for bad in ("", "decision", "0193", minted + "0", "{" + minted + "}", "z" * 36):
        with pytest.raises(ValueError):
            parse_decision_id(bad)


def _mint(count: int) -> list[str]:
    return [new_decision_id() for _ in range(count)]


def _inherited_millisecond() -> int:
    return decision_ids._clock.last_ms


def test_ids_of_separate_processes_sort_by_time_and_never_clash() -> None:
    # Workers are forked from one parent: each must reseed, not follow the parent's counter.
    parent = new_decision_id()
    context = multiprocessing.get_context("fork")
    with context.Pool(1) as pool:
        assert pool.apply(_inherited_millisecond) == -1
    time.sleep(0.002)
    with context.Pool(2) as pool:
        together = pool.map(_mint, [2000, 2000])  # the two at once, in the same milliseconds
        time.sleep(0.002)
        afterwards = pool.apply(_mint, (100,))
    everything = [parent, *together[0], *together[1], *afterwards]
    assert len(set(everything)) == len(everything)
    assert min(afterwards) > max(together[0] + together[1]) > parent


def test_a_cited_message_ends_with_the_id() -> None:
    minted = new_decision_id()
    assert cite("[max-partitions] too many", minted) == (
        f"[max-partitions] too many (decision {minted})"
    )
