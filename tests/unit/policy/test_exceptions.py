"""Exceptions that expire: the schema, the expiry instant, matching, and the decision."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kafka_policy_proxy.policy.builders import (
    alter_configs_request,
    create_request,
    delete_topic_request,
)
from kafka_policy_proxy.policy.decision_log import (
    DecisionRecord,
    Outcome,
    Stamp,
    decision_record,
    outcome,
)
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.judge import ClusterFacts, Judgement, judge
from kafka_policy_proxy.policy.loader import PolicyError, load_policy
from kafka_policy_proxy.policy.model import Decision, Principal, TopicRequest
from tests.unit.policy.helpers import ALICE, cluster, topic

EXPIRES = datetime(2026, 12, 1, 18, 0, tzinfo=UTC)
BEFORE = EXPIRES - timedelta(microseconds=1)
BOB = Principal("User:bob")
RULES: list[dict[str, Any]] = [
    {"name": "small", "partitions": {"max": 10}},
    {"name": "durable", "replication": {"min": 3}},
    {"name": "watched", "mode": "audit", "match": {"topic_prefix": "audited."}, "deny": True},
]
MIGRATION: dict[str, Any] = {
    "name": "alice-migration",
    "match": {"principals": ["User:alice"], "topic_prefix": "orders.", "actions": ["create"]},
    "waive": ["small"],
    "reason": "orders move to 96 partitions",
    "ticket": "OPS-42",
    "expires": "2026-12-01T19:00:00+01:00",  # EXPIRES, in another offset
}


def policy(*exceptions: dict[str, Any], **top: Any) -> CompiledPolicy:
    return load_policy({"rules": RULES, "exceptions": list(exceptions), **top}, "test")


def problems(document: dict[str, Any], now: datetime | None = None) -> list[tuple[str, str]]:
    with pytest.raises(PolicyError) as caught:
        load_policy(document, "test", now=now)
    return [(p.where, p.reason) for p in caught.value.problems]


def decide(compiled: CompiledPolicy, request: TopicRequest, now: datetime | None) -> Decision:
    (verdict,) = judge(compiled, [request], ClusterFacts(cluster(topic("orders.v1"))), now=now)
    assert verdict.decision is not None
    return verdict.decision


def big(name: str = "orders.v2", who: Principal = ALICE) -> TopicRequest:
    return create_request(name, 96, 3, principal=who)


def test_an_exception_waives_until_its_expiry_instant_and_not_at_it() -> None:
    compiled = policy(MIGRATION)
    waived = decide(compiled, big(), BEFORE)
    assert waived.allowed and outcome(waived) is Outcome.ALLOWED
    assert waived.violations == ()
    (waiver,) = waived.waived
    assert (waiver.rule, waiver.exception, waiver.ticket) == ("small", "alice-migration", "OPS-42")
    assert waiver.expires == "2026-12-01T18:00:00.000000Z"
    assert waiver.message.startswith("[small] ")
    expired = decide(compiled, big(), EXPIRES)
    assert not expired.allowed and expired.waived == ()
    assert [v.rule for v in expired.violations if v.mode.value == "enforce"] == ["small"]
    # No instant given: nothing is waived (the judge reads no clock).
    assert not decide(compiled, big(), None).allowed


def test_audit_mode_violations_stay_recorded_beside_the_waiver() -> None:
    anywhere = {**MIGRATION, "match": {"principals": ["User:alice"]}}
    decision = decide(policy(anywhere), big("audited.orders"), BEFORE)
    assert [v.rule for v in decision.violations] == ["watched"]
    assert outcome(decision) is Outcome.AUDIT_WOULD_DENY
    assert [w.rule for w in decision.waived] == ["small"]


def test_only_the_selected_requests_are_waived() -> None:
    compiled = policy(MIGRATION)
    assert not decide(compiled, big(who=BOB), BEFORE).allowed  # another principal
    assert not decide(compiled, big("payments.v2"), BEFORE).allowed  # another topic
    altered = alter_configs_request("orders.v1", [("retention.ms", "1")], principal=ALICE)
    assert decide(compiled, altered, BEFORE).waived == ()  # another action


def test_a_rule_the_exception_does_not_name_still_denies() -> None:
    request = create_request("orders.v2", 96, 1, principal=ALICE)
    decision = decide(policy(MIGRATION), request, BEFORE)
    assert not decision.allowed
    assert [v.rule for v in decision.violations if v.mode.value == "enforce"] == ["durable"]
    assert [w.rule for w in decision.waived] == ["small"]


def test_the_first_exception_in_force_names_the_waiver() -> None:
    earlier = {**MIGRATION, "name": "old", "expires": "2026-11-01T00:00:00Z"}
    later = {**MIGRATION, "name": "renewed", "ticket": None}
    decision = decide(policy(earlier, later), big(), BEFORE)
    assert [(w.exception, w.ticket) for w in decision.waived] == [("renewed", None)]


def test_a_missing_topic_and_unreadable_facts_are_never_waived() -> None:
    everything = {**MIGRATION, "match": {}, "waive": ["small", "durable"]}
    compiled = policy(everything)
    gone = delete_topic_request("orders.nope", principal=ALICE)
    (verdict,) = judge(compiled, [gone], ClusterFacts(cluster()), now=BEFORE)
    assert verdict.decision is not None and verdict.decision.waived == ()
    denied = Judgement(compiled, [big()], now=BEFORE).unavailable("timed out")
    assert denied[0].decision is not None and not denied[0].decision.allowed


def test_the_judge_refuses_a_naive_now() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        Judgement(policy(MIGRATION), [big()], now=datetime(2026, 12, 1))


def test_a_waived_decision_round_trips_and_its_record_validates() -> None:
    decision = decide(policy(MIGRATION), big(), BEFORE)
    assert Decision.from_dict(json.loads(json.dumps(decision.to_dict()))) == decision
    assert "waived" not in decide(policy(MIGRATION), big(), EXPIRES).to_dict()
    stamp = Stamp(
        time="2026-12-01T17:59:59.999999Z",
        decision_id="d1",
        policy_revision="sha256:x",
        cluster_id=None,
        proxy_id="p",
        conn=1,
        client="10.0.0.1:1",
        api="CreateTopics",
        api_key=19,
        api_version=7,
    )
    record = decision_record(big(), decision, stamp)
    assert record["decision"] == "allowed"
    assert record["waived"] == [
        {
            "rule": "small",
            "exception": "alice-migration",
            "ticket": "OPS-42",
            "expires": "2026-12-01T18:00:00.000000Z",
            "message": decision.waived[0].message,
        }
    ]
    DecisionRecord.model_validate(json.loads(json.dumps(record)))
    plain = decision_record(big(), decide(policy(), big(), BEFORE), stamp)
    assert "waived" not in plain


@pytest.mark.parametrize(
    ("change", "where", "reason"),
    [
        ({"expires": "2026-12-01T18:00:00"}, "exceptions[0].expires", "RFC 3339"),
        ({"expires": "next tuesday"}, "exceptions[0].expires", "RFC 3339"),
        ({"expires": 1795000000}, "exceptions[0].expires", "RFC 3339"),
        ({"expires": datetime(2026, 12, 1)}, "exceptions[0].expires", "naive"),
        ({"reason": "  "}, "exceptions[0].reason", "must say why"),
        ({"reason": None}, "exceptions[0].reason", "valid string"),
        ({"name": "Bad Name"}, "exceptions[0].name", "pattern"),
        ({"waive": []}, "exceptions[0].waive", "at least 1"),
        ({"waive": ["small", "nope"]}, "exceptions[0].waive[1]", "no rule, plugin or budget named"),
        ({"waive": ["*"]}, "exceptions[0].waive[0]", "`*` is refused"),
        ({"match": {"actions": ["explode"]}}, "exceptions[0].match.actions[0]", "create"),
        ({"colour": "red"}, "exceptions[0].colour", "unknown key"),
    ],
)
def test_a_bad_exception_is_refused_naming_its_key(
    change: dict[str, Any], where: str, reason: str
) -> None:
    found = problems({"rules": RULES, "exceptions": [{**MIGRATION, **change}]})
    assert [w for w, _ in found] == [where], found
    assert reason in found[0][1], found


def test_required_keys_are_named() -> None:
    bare = {"name": "x", "match": {}, "waive": ["small"]}
    found = problems({"rules": RULES, "exceptions": [bare]})
    assert found == [
        ("exceptions[0].reason", "required key is missing"),
        ("exceptions[0].expires", "required key is missing"),
    ]


def test_exception_names_are_unique() -> None:
    found = problems({"rules": RULES, "exceptions": [MIGRATION, MIGRATION]})
    assert found == [("exceptions[1].name", "duplicate exception name 'alice-migration'")]


def test_max_days_counts_from_the_loading_instant() -> None:
    document = {
        "rules": RULES,
        "exceptions": [MIGRATION],
        "exception_policy": {"max_days": 30},
    }
    loaded_at = EXPIRES - timedelta(days=30)
    assert load_policy(document, "test", now=loaded_at).exceptions.items
    early = loaded_at - timedelta(seconds=1)
    ((where, reason),) = problems(document, early)
    assert where == "exceptions[0].expires"
    assert "exception_policy.max_days allows 30" in reason
    # A reload later never refuses what passed: the expiry only comes nearer.
    assert load_policy(document, "test", now=EXPIRES + timedelta(days=1)).exceptions.items
    assert problems({**document, "exception_policy": {"max_days": 0}}) == [
        ("exception_policy.max_days", "Input should be greater than or equal to 1")
    ]


def test_an_expired_exception_loads_and_waives_nothing() -> None:
    compiled = load_policy(
        {"rules": RULES, "exceptions": [MIGRATION]}, "test", now=EXPIRES + timedelta(days=400)
    )
    assert [e.name for e in compiled.exceptions.expired(EXPIRES)] == ["alice-migration"]
    assert compiled.exceptions.in_force(BEFORE)
    assert not decide(compiled, big(), EXPIRES + timedelta(days=400)).allowed
