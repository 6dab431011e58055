"""The process-wide memory budget, with fake connections and a fake clock."""

from __future__ import annotations

from kafka_policy_proxy.proxy.net.memory_budget import PAUSE, MemoryBudget


class Clock:
    """Time that moves only when the test says."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Conn:
    """A connection that buffers what the test says, and records what the budget did to it."""

    def __init__(self, budget: MemoryBudget) -> None:
        self.budget = budget
        self.held = 0
        self.buffered = 0
        self.pauses: set[str] = set()
        self.closed_for: tuple[int, float] | None = None
        budget.join(self)

    def hold(self, n: int) -> None:
        self.buffered = n
        self.recount()

    def pause(self, reason: str) -> None:
        self.pauses.add(reason)

    def resume(self, reason: str) -> None:
        self.pauses.discard(reason)

    def recount(self) -> None:
        if self.buffered != self.held:
            delta, self.held = self.buffered - self.held, self.buffered
            self.budget.charge(self, delta)

    def stalled(self, held: int, stalled_s: float) -> None:
        self.closed_for = (held, stalled_s)

    @property
    def paused(self) -> bool:
        return PAUSE in self.pauses


def test_under_the_limit_nobody_is_paused() -> None:
    budget = MemoryBudget(1000, stall_timeout_s=5)
    a, b = Conn(budget), Conn(budget)
    a.hold(400)
    b.hold(500)
    assert budget.used == 900
    assert not a.paused and not b.paused


def test_reaching_the_limit_pauses_the_grower_and_the_largest_holders() -> None:
    budget = MemoryBudget(1000, stall_timeout_s=5)
    big, small, idle, grower = Conn(budget), Conn(budget), Conn(budget), Conn(budget)
    big.hold(600)
    small.hold(50)
    grower.hold(400)  # 1050: over
    assert grower.paused and big.paused
    assert not small.paused and not idle.paused
    assert budget.paused == 2


def test_a_connection_that_grows_while_over_budget_is_paused() -> None:
    budget = MemoryBudget(1000, stall_timeout_s=5)
    a, b = Conn(budget), Conn(budget)
    a.hold(1000)
    assert a.paused and not b.paused
    b.hold(100)  # more than a small request (1000 / 64)
    assert b.paused


def test_a_small_request_goes_on_while_others_hold_the_budget() -> None:
    # The attackers stalled at the limit must not stop every other client's next request.
    budget = MemoryBudget(6400, stall_timeout_s=5)
    attacker, client, other = Conn(budget), Conn(budget), Conn(budget)
    attacker.hold(6400)
    assert attacker.paused
    client.hold(100)  # = 6400 / 64: small
    other.hold(100)
    assert not client.paused and not other.paused
    client.hold(101)  # no longer small
    assert client.paused


def test_small_requests_stop_once_the_reserve_is_spent() -> None:
    budget = MemoryBudget(6400, stall_timeout_s=5)  # reserve 800, small 100
    attacker = Conn(budget)
    attacker.hold(6400)
    clients = [Conn(budget) for _ in range(9)]
    for c in clients:
        c.hold(100)
    assert [c.paused for c in clients] == [False] * 7 + [True] * 2  # 7200 reached at the 8th
    assert budget.used <= budget.hard_limit + 100


def test_reading_resumes_below_the_low_water_mark_only() -> None:
    budget = MemoryBudget(1000, stall_timeout_s=5)
    a, b = Conn(budget), Conn(budget)
    a.hold(600)
    b.hold(500)
    assert a.paused and b.paused
    b.hold(200)  # 800: under the limit, above low water (750)
    assert a.paused and b.paused
    b.hold(100)  # 700
    assert not a.paused and not b.paused
    assert budget.paused == 0


def test_leaving_releases_what_a_connection_held() -> None:
    budget = MemoryBudget(1000, stall_timeout_s=5)
    a, b = Conn(budget), Conn(budget)
    a.hold(900)
    b.hold(200)
    assert b.paused
    budget.leave(a)
    assert budget.used == 200
    assert a.held == 0
    assert not b.paused


def test_holding_still_under_the_limit_is_allowed() -> None:
    clock = Clock()
    budget = MemoryBudget(1000, stall_timeout_s=5, clock=clock)
    quiet = Conn(budget)
    quiet.hold(900)
    budget.check()
    clock.now = 60
    budget.check()
    assert quiet.closed_for is None


def test_over_the_limit_a_connection_without_progress_is_closed() -> None:
    clock = Clock()
    budget = MemoryBudget(1000, stall_timeout_s=5, clock=clock)
    stuck, moving = Conn(budget), Conn(budget)
    stuck.hold(600)
    moving.hold(500)  # 1100: over
    budget.check()
    clock.now = 3
    moving.buffered = 450
    budget.check()
    clock.now = 4.9
    budget.check()
    assert stuck.closed_for is None
    clock.now = 5.5
    budget.check()
    assert stuck.closed_for == (600, 5.5)
    assert moving.closed_for is None  # it made progress at t=3
    assert budget.used == 450
    assert not moving.paused  # below low water again


def test_check_recounts_what_changed_without_an_event() -> None:
    budget = MemoryBudget(1000, stall_timeout_s=5)
    a = Conn(budget)
    a.hold(900)
    a.buffered = 100  # a write buffer drained, and nobody said so
    budget.check()
    assert budget.used == 100
