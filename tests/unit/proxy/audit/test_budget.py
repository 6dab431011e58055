"""The per-principal audit budget: spent bytes refuse a principal for the rest of its minute,
ANONYMOUS is counted per client host, and the principals tracked are bounded."""

from __future__ import annotations

from prometheus_client import REGISTRY

from kafka_policy_proxy.proxy.audit.budget import AuditBudget, budget_key


def _denials() -> float:
    return REGISTRY.get_sample_value("kpp_audit_budget_denials_total") or 0.0


def test_a_principal_over_its_budget_is_refused_until_its_minute_is_over() -> None:
    now = [0.0]
    budget = AuditBudget(1000, clock=lambda: now[0])
    budget.charge("User:mallory", 999)
    assert budget.allows("User:mallory")
    before = _denials()
    budget.charge("User:mallory", 1)
    assert not budget.allows("User:mallory")
    assert _denials() == before + 1
    assert budget.allows("User:alice")  # another principal is untouched
    now[0] = 60.0
    assert budget.allows("User:mallory")


def test_anonymous_is_counted_per_client_host() -> None:
    budget = AuditBudget(100)
    budget.charge("User:ANONYMOUS", 100, "10.0.0.9:40000")
    assert not budget.allows("User:ANONYMOUS", "10.0.0.9:40001")  # another port, same host
    assert budget.allows("User:ANONYMOUS", "10.0.0.7:40000")
    # Asked without an address, ANONYMOUS is judged on all its hosts together.
    assert not budget.allows("User:ANONYMOUS")
    assert budget_key("User:bob", "10.0.0.9:1") == "User:bob"
    assert budget_key("User:ANONYMOUS", "[::1]:9") == "User:ANONYMOUS@[::1]"


def test_memory_is_bounded_and_zero_is_unlimited() -> None:
    budget = AuditBudget(100, max_principals=3)
    for i in range(1000):
        budget.charge(f"User:u{i}", 10)
    assert len(budget) == 3
    unlimited = AuditBudget(0)
    unlimited.charge("User:mallory", 10**12)
    assert unlimited.allows("User:mallory") and len(unlimited) == 0
