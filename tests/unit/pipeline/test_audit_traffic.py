"""The realistic bench data (harness/audit_traffic.py) has the shape docs/benchmarks.md states:
a fixed population, creates once per topic, heavy repeats of auto-creates and validate-only
checks, GitOps bursts, a diurnal rate over days, and records the one judge would write."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from harness.audit_population import build
from harness.audit_traffic import Shape, Traffic
from harness.traffic_stats import kind_of, traffic_stats
from kafka_policy_proxy.policy.decision_ids import decision_time
from kafka_policy_proxy.policy.decision_log import DecisionRecord
from kafka_policy_proxy.policy.loader import load_policy

REPO = Path(__file__).resolve().parents[3]
POLICY = load_policy((REPO / "examples" / "policy.yaml").read_text(), "policy.yaml")
SHAPE = Shape(events=20_000, topics=700, principals=60, days=3.5)


@pytest.fixture(scope="module")
def generated() -> tuple[Traffic, list[str]]:
    """The small shape's traffic (its cluster as it left it) and its lines, made once."""
    made = Traffic(POLICY, SHAPE)
    return made, list(made.lines())


@pytest.fixture(scope="module")
def traffic(generated: tuple[Traffic, list[str]]) -> Traffic:
    """The traffic, after it was generated."""
    return generated[0]


@pytest.fixture(scope="module")
def records(generated: tuple[Traffic, list[str]]) -> list[dict[str, Any]]:
    """The traffic's records, parsed."""
    return [json.loads(line) for line in generated[1]]


def test_the_population_has_the_sizes_asked_for() -> None:
    for topics, principals in ((700, 60), (20_000, 200), (100_000, 400)):
        population = build(topics, principals, 0.8, seed=3)
        assert sum(1 for s in population.specs if s.domain != "streams") == topics
        assert len(population.principals) == principals
        names = [s.name for s in population.specs]
        assert len(set(names)) == len(names)


def test_records_come_from_the_population_and_the_traffic_is_as_long_as_asked(
    traffic: Traffic, records: list[dict[str, Any]]
) -> None:
    assert len(records) == SHAPE.events
    population = traffic.population
    assert {r["principal"] for r in records} <= {p.name for p in population.principals}
    named = {s.name for s in population.specs} | {
        s.broken.name for s in population.specs if s.broken is not None
    }
    wanted = {n for p in population.principals for n in p.wanted}
    assert {r["topic"] for r in records} <= named | wanted
    kinds = Counter(p.kind for p in population.principals)
    assert {r["principal"] for r in records if r["api"] == "Metadata"} >= {"User:ANONYMOUS"}
    assert len({r["principal"] for r in records}) > len(population.principals) // 2, kinds


def test_each_topic_is_created_once_and_exists_afterwards(
    traffic: Traffic, records: list[dict[str, Any]]
) -> None:
    created = Counter(
        r["topic"]
        for r in records
        if kind_of(r) == "create" and r["decision"] in ("allowed", "audit-would-deny")
    )
    assert len(created) > 50
    assert max(created.values()) == 1
    initial = {s.name for s in traffic.population.specs if not s.due}
    assert not set(created) & initial
    deleted = {
        r["topic"] for r in records if r["action"] == "delete" and r["decision"] == "allowed"
    }
    for topic in set(created) - deleted:
        assert traffic.cluster.topic(topic) is not None
    for topic in deleted:
        assert traffic.cluster.topic(topic) is None


def test_auto_creates_and_validate_only_creates_repeat_heavily(
    records: list[dict[str, Any]],
) -> None:
    for kind in ("auto-create", "validate-only create"):
        asked = Counter((r["principal"], r["topic"]) for r in records if kind_of(r) == kind)
        assert sum(asked.values()) > SHAPE.events // 5
        assert sum(asked.values()) / len(asked) > 10, kind
    stats = traffic_stats(json.dumps(r) for r in records)
    # The address makes a text distinct per connection; without it, most requests repeat.
    assert stats["distinct_requests_without_address"] < stats["distinct_request_texts"]
    assert stats["distinct_requests_without_address"] < SHAPE.events // 10


def test_gitops_applies_in_bursts(records: list[dict[str, Any]]) -> None:
    by_connection: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        if r["principal"].startswith(("User:gitops-", "User:team-")):
            by_connection[r["proxy_id"], r["conn"]].append(r)
    sizes = sorted(len(burst) for burst in by_connection.values())
    assert sizes[len(sizes) // 2] >= 5
    for burst in by_connection.values():
        first, last = (datetime.fromisoformat(burst[i]["time"]) for i in (0, -1))
        assert last - first < timedelta(seconds=1)


def test_every_record_is_valid_and_some_carry_waivers_and_budgets(
    records: list[dict[str, Any]],
) -> None:
    for record in records:
        DecisionRecord.model_validate(record)
    assert any("waived" in r for r in records)
    assert any("budgets" in r for r in records)
    assert {r["decision"] for r in records} >= {"allowed", "denied", "audit-would-deny"}


def test_records_are_time_ordered_with_ids_that_carry_their_time(
    records: list[dict[str, Any]],
) -> None:
    times = [r["time"] for r in records]
    ids = [r["decision_id"] for r in records]
    assert times == sorted(times)
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    for r in records[:: len(records) // 50]:
        moment = datetime.fromisoformat(r["time"])
        assert decision_time(r["decision_id"]) == moment.replace(
            microsecond=moment.microsecond // 1000 * 1000
        )


def test_the_traffic_spreads_over_days_with_a_diurnal_rate_and_a_partial_last_day(
    records: list[dict[str, Any]],
) -> None:
    hours = Counter(datetime.fromisoformat(r["time"]).hour for r in records)
    days = Counter(r["time"][:10] for r in records)
    assert len(days) == 4
    assert SHAPE.start.date().isoformat() == min(days)
    last = max(r["time"] for r in records)
    assert datetime.fromisoformat(last) < datetime.fromisoformat(max(days)).replace(
        hour=13, tzinfo=UTC
    )
    assert sum(hours[h] for h in range(12, 16)) > 3 * sum(hours[h] for h in range(0, 4))


def test_the_same_seed_gives_the_same_records_and_another_seed_others() -> None:
    small = Shape(events=3_000, topics=700, principals=60, days=3.5)
    once = list(Traffic(POLICY, small).lines())
    assert list(Traffic(POLICY, small).lines()) == once
    other = Shape(events=3_000, topics=700, principals=60, days=3.5, seed=2)
    assert list(Traffic(POLICY, other).lines()) != once


def test_a_kept_judgement_gives_the_records_judging_again_gives() -> None:
    small = Shape(events=6_000, topics=700, principals=60, days=3.5)
    kept = Traffic(POLICY, small)
    fresh = Traffic(POLICY, small, memo=False)
    assert list(kept.lines()) == list(fresh.lines())
    assert kept.judged < fresh.judged
