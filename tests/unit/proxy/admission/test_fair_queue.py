"""The fair queue: a bound on work in progress, fair order by flow and cost, nothing kept idle."""

from __future__ import annotations

import pytest

from kafka_policy_proxy.proxy.admission.fair_queue import LIGHT, FairQueue, Ticket

HEAVY = 5000
MEDIUM = 5 * LIGHT  # over the lane of small requests


def drain(queue: FairQueue, running: list[Ticket]) -> list[str]:
    """Finish the running tickets one by one (oldest first); the flows in the order they ran."""
    order = []
    while running:
        done = running.pop(0)
        order.append(str(done.flow))
        running.extend(queue.leave(done))
    return order


def test_runs_at_most_its_slots_at_once() -> None:
    queue = FairQueue(2)
    tickets = [queue.arrive(f"f{i}", MEDIUM) for i in range(5)]
    assert [t.state for t in tickets] == ["running"] * 2 + ["waiting"] * 3
    assert (queue.running, queue.waiting) == (2, 3)
    started = queue.leave(tickets[0])
    assert started == [tickets[2]]
    assert (queue.running, queue.waiting) == (2, 2)


def test_equal_flows_take_turns_round_robin() -> None:
    queue = FairQueue(1)
    first = queue.arrive("a", MEDIUM)
    for _ in range(3):
        for flow in "abc":
            queue.arrive(flow, MEDIUM)
    # a's first ran at once, so b and c go first; then each flow once a round.
    assert drain(queue, [first]) == list("a" + "bc" + "abc" + "abc" + "a")


def test_a_single_entry_starts_beside_the_batches() -> None:
    queue = FairQueue(2)
    running = [queue.arrive(f"heavy{i}", HEAVY) for i in range(2)]
    for i in range(10):
        queue.arrive(f"heavy{i}", HEAVY)
    canaries = [queue.arrive(f"canary{i}", 1) for i in range(3)]
    # The lane of small requests holds as many as the slots; the third one waits.
    assert [c.state for c in canaries] == ["running", "running", "waiting"]
    assert queue.running == 4
    assert queue.leave(canaries[0]) == []  # a lane place frees no slot for a batch
    queue.leave(canaries[1])
    assert queue.leave(running[0]) == [canaries[2]]


def test_a_single_entry_overtakes_every_queued_batch() -> None:
    queue = FairQueue(2)
    running = [queue.arrive(f"heavy{i}", HEAVY) for i in range(2)]
    lane = [queue.arrive(f"small{i}", LIGHT) for i in range(2)]  # the lane is full
    for _ in range(3):
        for i in range(10):
            queue.arrive(f"heavy{i}", HEAVY)
    canary = queue.arrive("canary", 1)
    assert canary.state == "waiting"
    assert all(t.state == "running" for t in lane)
    # The canary starts at the first free slot: before any of the 30 batches queued.
    started = queue.leave(running[0])
    assert started == [canary]


def test_a_heavy_flow_delays_a_light_one_by_at_most_one_turn() -> None:
    queue = FairQueue(1)
    running = [queue.arrive("heavy", HEAVY)]
    for _ in range(5):
        queue.arrive("heavy", HEAVY)
    lights = [queue.arrive("light", MEDIUM) for _ in range(3)]
    # Each light request, sent while the heavy flow's batches queue, runs before the next batch.
    order = drain(queue, running)
    assert order[:4] == ["heavy", "light", "light", "light"]
    assert all(t.state == "done" for t in lights)


def test_a_flow_pays_for_its_cost() -> None:
    queue = FairQueue(1)
    running = [queue.arrive("x", MEDIUM)]
    for _ in range(4):
        queue.arrive("big", 10 * MEDIUM)
        for _ in range(10):
            queue.arrive("small", MEDIUM)
    # Entries are served fairly: 10 of small's requests for each of big's 10 times larger.
    order = drain(queue, running)[1:]
    for round_ in range(4):
        assert order[11 * round_ : 11 * (round_ + 1)].count("big") == 1


def test_giving_up_frees_the_place_and_the_slot() -> None:
    queue = FairQueue(1)
    first = queue.arrive("a", MEDIUM)
    waiting = queue.arrive("b", MEDIUM)
    third = queue.arrive("c", MEDIUM)
    assert queue.leave(waiting) == []  # gave up waiting: nothing starts, the slot is a's
    assert queue.waiting == 1
    assert queue.leave(first) == [third]
    assert queue.leave(third) == []
    assert queue.leave(third) == []  # leaving twice changes nothing
    assert (queue.running, queue.waiting) == (0, 0)


def test_forgets_idle_flows_and_abandoned_places() -> None:
    queue = FairQueue(1)
    blocker = queue.arrive("blocker", MEDIUM)
    for i in range(1000):
        queue.leave(queue.arrive(f"gone{i}", MEDIUM))  # closed connections, each a flow
    assert queue.waiting == 0
    assert len(queue._heap) <= 32 and len(queue._last) == 1
    queue.leave(blocker)
    assert not queue._last and not queue._present


def test_needs_a_slot() -> None:
    with pytest.raises(ValueError, match="slots"):
        FairQueue(0)
