"""The running proxy and its exceptions: an expired one loads (and waives nothing), max_days
counts from each load, and the gauges say what is in force and how long is left."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from structlog.testing import capture_logs

from kafka_policy_proxy.proxy.metrics import count_waivers, policy_exceptions
from kafka_policy_proxy.proxy.runtime.policy_source import PolicySource

RULES = "rules:\n  - {name: small, partitions: {max: 2}}\n"


def exception(name: str, expires: datetime) -> str:
    return (
        f"  - name: {name}\n    match: {{}}\n    waive: [small]\n    reason: r\n"
        f'    expires: "{expires.isoformat()}"\n'
    )


def sample(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def test_an_expired_exception_loads_with_a_warning_and_a_reload_keeps_it(
    tmp_path: Path,
) -> None:
    now = datetime.now(UTC)
    path = tmp_path / "policy.yaml"
    path.write_text(
        RULES
        + "exception_policy: {max_days: 30}\nexceptions:\n"
        + exception("gone", now - timedelta(days=1))
        + exception("live", now + timedelta(days=10))
    )
    source = PolicySource(path)
    with capture_logs() as logs:
        policy = source.load()
    assert [e.name for e in policy.exceptions.expired(now)] == ["gone"]
    (warning,) = [entry for entry in logs if entry["log_level"] == "warning"]
    assert warning["exceptions"] == ["gone"]
    assert sample("kpp_policy_exceptions_in_force") == 1
    live = sample("kpp_policy_exception_expiry_seconds", exception="live")
    assert live is not None and 9 * 86400 < live <= 10 * 86400
    gone = sample("kpp_policy_exception_expiry_seconds", exception="gone")
    assert gone is not None and gone < 0
    # Time passing never makes a reload refuse what loaded (an expiry only comes nearer).
    path.write_text(path.read_text() + "\n")
    assert source.reload() is True
    # One beyond max_days, counted from this reload's instant, is refused; the old stays.
    path.write_text(path.read_text() + exception("far", now + timedelta(days=31)))
    assert source.reload() is False
    assert source.current() is not None
    assert [e.name for e in source.current().exceptions.items] == ["gone", "live"]
    source.close()


def test_the_gauges_follow_the_policy_in_force() -> None:
    now = datetime(2027, 1, 1, tzinfo=UTC)
    policy_exceptions([("a", now + timedelta(seconds=90)), ("b", now)], now)
    assert sample("kpp_policy_exceptions_in_force") == 1  # b expires at this very instant
    assert sample("kpp_policy_exception_expiry_seconds", exception="a") == 90
    assert sample("kpp_policy_exception_expiry_seconds", exception="b") == 0
    policy_exceptions([("a", now + timedelta(seconds=90))], now + timedelta(seconds=100))
    assert sample("kpp_policy_exception_expiry_seconds", exception="a") == -10
    assert sample("kpp_policy_exception_expiry_seconds", exception="b") is None
    assert sample("kpp_policy_exceptions_in_force") == 0


def test_waivers_count_once_per_decision_and_exception() -> None:
    before = sample("kpp_policy_waivers_total", exception="w") or 0.0
    count_waivers(["w", "w", "v"])
    assert sample("kpp_policy_waivers_total", exception="w") == pytest.approx(before + 1)
