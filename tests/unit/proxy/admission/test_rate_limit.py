"""Per-flow token buckets in the KIP-599 style: admitted while not in debt, then throttled."""

from __future__ import annotations

import pytest

from kafka_policy_proxy.proxy.admission.rate_limit import RateLimits


def test_a_burst_passes_then_the_debt_is_the_throttle_time() -> None:
    limits = RateLimits(rate=100, burst=200)
    assert limits.take("p", 150, now=0.0) == 0.0
    assert limits.take("p", 150, now=0.0) == 0.0  # 50 left: not in debt, so it passes whole
    assert limits.take("p", 1, now=0.0) == pytest.approx(1.0)  # 100 in debt at 100/s
    assert limits.take("p", 1, now=0.5) == pytest.approx(0.5)  # nothing taken meanwhile
    assert limits.take("p", 1, now=1.0) == 0.0


def test_one_batch_larger_than_the_burst_passes_once() -> None:
    limits = RateLimits(rate=10, burst=10)
    assert limits.take("p", 5000, now=0.0) == 0.0
    assert limits.take("p", 1, now=0.0) == pytest.approx(499.0)


def test_flows_are_independent() -> None:
    limits = RateLimits(rate=10, burst=10)
    limits.take("attacker", 100, now=0.0)
    assert limits.take("attacker", 1, now=0.0) > 0
    assert limits.take("canary", 1, now=0.0) == 0.0


def test_the_refill_stops_at_the_burst() -> None:
    limits = RateLimits(rate=10, burst=20)
    assert limits.take("p", 20, now=100.0) == 0.0
    assert limits.take("p", 1, now=100.0) == 0.0  # exactly empty is not in debt
    assert limits.take("p", 1, now=100.0) == pytest.approx(0.1)


def test_full_buckets_and_closed_connections_are_forgotten() -> None:
    limits = RateLimits(rate=10, burst=10)
    for i in range(1000):
        limits.take(("connection", i), 1, now=float(i))  # each refilled by the next take
    assert len(limits) <= 130
    limits.take("kept", 100, now=2000.0)
    limits.forget("kept")
    assert limits.take("kept", 1, now=2000.0) == 0.0


def test_rate_and_burst_must_be_positive() -> None:
    with pytest.raises(ValueError):
        RateLimits(rate=0, burst=1)
