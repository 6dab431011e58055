"""Budgets: the schema, the usage arithmetic, batches, messages and the record, as judged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from kafka_policy_proxy.policy.budgets import (
    _amounts,
    budget_for_topic,
    change,
    requested_state,
    user_of,
)
from kafka_policy_proxy.policy.builders import (
    create_partitions_request,
    create_request,
    incremental_alter_configs_request,
    resolve,
)
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.decision_log import DecisionRecord
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.judge import ClusterFacts, FactsNotRecorded, Judgement, judge
from kafka_policy_proxy.policy.loader import PolicyError, load_policy
from kafka_policy_proxy.policy.model import (
    BudgetUse,
    ConfigMap,
    Fact,
    Mode,
    Principal,
    TopicRequest,
)
from kafka_policy_proxy.policy.offline.recorded_facts import RecordedFacts
from tests.unit.policy.helpers import ALICE, DEFAULTS, cluster, topic
from tests.unit.policy.test_decision_log import _record

TEAM_A = Principal("User:team-a", "cli", "10.0.0.9")
TEAM_B = Principal("User:team-b", "cli", "10.0.0.10")


def policy(*budgets: dict[str, Any]) -> CompiledPolicy:
    """A policy of budgets only (they enforce)."""
    return load_policy({"budgets": list(budgets)}, "test")


PER_TEAM = {
    "name": "team-partitions",
    "principals": ["User:team-*"],
    "topic_prefix": "{user}.",
    "max_partitions": 500,
}


def verdicts(p: CompiledPolicy, *requests: TopicRequest, state: Any = None) -> list[Any]:
    return judge(p, list(requests), ClusterFacts(state if state is not None else cluster()))


def test_the_issue_example_states_usage_limit_and_what_is_counted() -> None:
    state = cluster(topic("team-a.old", 480, 3), topic("team-b.big", 900, 3))
    (v,) = verdicts(
        policy(PER_TEAM), create_request("team-a.x", 24, 3, principal=TEAM_A), state=state
    )
    assert not v.decision.allowed
    assert v.decision.message == (
        "[team-partitions] team-a uses 480 of its 500 partitions; "
        "topic 'team-a.x' would add 24 (504 > 500)"
    )
    assert v.decision.violations[0].rule == "team-partitions"
    assert v.decision.budgets == (BudgetUse("team-partitions", 480, 24, 500, "partitions"),)
    # team-b's 900 partitions are its own: team-b.* is a separate counter, and team-a.* is not it.
    (b,) = verdicts(policy(PER_TEAM), create_request("team-b.y", 24, principal=TEAM_B), state=state)
    assert "team-b uses 900 of its 500" in b.decision.message
    (fits,) = verdicts(
        policy(PER_TEAM), create_request("team-a.x", 20, 3, principal=TEAM_A), state=state
    )
    assert fits.decision.allowed and fits.decision.budgets[0].usage == 480


def test_count_replicas_multiplies_by_the_replication_factor_and_says_so() -> None:
    budget = {**PER_TEAM, "count_replicas": True}
    state = cluster(topic("team-a.old", 100, 3))  # 300 replicas
    (v,) = verdicts(
        policy(budget), create_request("team-a.x", 70, 3, principal=TEAM_A), state=state
    )
    assert v.decision.message == (
        "[team-partitions] team-a uses 300 of its 500 replicas (partitions x replication "
        "factor); topic 'team-a.x' would add 210 (510 > 500)"
    )
    assert v.decision.budgets[0].unit == "replicas"
    # The broker's default replication factor (3) counts where the create leaves it out.
    (d,) = verdicts(policy(budget), create_request("team-a.y", 70, principal=TEAM_A), state=state)
    assert not d.decision.allowed and d.decision.budgets[0].added == 210


def test_principals_without_their_placeholder_only_select() -> None:
    budget = {
        "name": "orders",
        "principals": ["User:team-a"],
        "topic_prefix": "orders.",
        "max_topics": 2,
    }
    state = cluster(topic("orders.a"), topic("orders.b"))
    (a,) = verdicts(policy(budget), create_request("orders.c", 1, principal=TEAM_A), state=state)
    assert a.decision.message == (
        "[orders] orders uses 2 of its 2 topics; topic 'orders.c' would add 1 (3 > 2)"
    )
    # Another principal is not judged by it, but what it owns counts.
    (b,) = verdicts(policy(budget), create_request("orders.c", 1, principal=TEAM_B), state=state)
    assert b.decision.allowed and not b.decision.budgets


def test_a_batch_that_overshoots_lets_the_first_that_fits_take_it() -> None:
    budget = {"name": "payments", "topic_prefix": "pay.", "max_partitions": 10}
    state = cluster(topic("pay.a", 4))
    first, second, third = verdicts(
        policy(budget),
        create_request("pay.b", 4, principal=ALICE),
        create_request("pay.c", 4, principal=ALICE),
        create_request("pay.d", 2, principal=ALICE),
        state=state,
    )
    assert first.decision.allowed
    assert not second.decision.allowed
    assert second.decision.message == (
        "[payments] payments uses 8 of its 10 partitions; topic 'pay.c' would add 4 (12 > 10)"
    )
    # A denied topic adds nothing: the third still fits after the first.
    assert third.decision.allowed
    assert third.decision.budgets == (BudgetUse("payments", 8, 2, 10, "partitions"),)


def test_a_topic_denied_by_a_rule_takes_nothing_from_the_budget() -> None:
    p = load_policy(
        {
            "rules": [{"name": "no-x", "match": {"topic": "pay[.]x.*"}, "deny": True}],
            "budgets": [{"name": "payments", "topic_prefix": "pay.", "max_partitions": 4}],
        },
        "test",
    )
    denied, allowed = judge(
        p,
        [create_request("pay.x", 4, principal=ALICE), create_request("pay.y", 4, principal=ALICE)],
        ClusterFacts(cluster()),
    )
    assert not denied.decision.allowed and [v.rule for v in denied.decision.violations] == ["no-x"]
    assert allowed.decision.allowed


def test_partition_increases_are_judged_by_what_they_add() -> None:
    budget = {"name": "payments", "topic_prefix": "pay.", "max_partitions": 10}
    state = cluster(topic("pay.a", 6), topic("pay.b", 2))
    (grow,) = verdicts(
        policy(budget), create_partitions_request("pay.a", 9, principal=ALICE), state=state
    )
    assert grow.decision.message == (
        "[payments] payments uses 8 of its 10 partitions; topic 'pay.a' would add 3 (11 > 10)"
    )
    (ok,) = verdicts(
        policy(budget), create_partitions_request("pay.a", 8, principal=ALICE), state=state
    )
    assert ok.decision.allowed and ok.decision.budgets[0].added == 2


RETENTION = {"name": "logs", "topic_prefix": "logs.", "max_retention_bytes": "10GiB"}
GIB = 1024**3


def test_retention_sums_partitions_times_retention_with_the_broker_default() -> None:
    # logs.a sets 1 GiB on 4 partitions; logs.b inherits the broker default of 1 GiB.
    state = cluster(topic("logs.a", 4, retention_bytes=str(GIB)), topic("logs.b", 2))
    state = type(state).of(state.topics, 3, {**state.defaults, "retention.bytes": str(GIB)})
    (v,) = verdicts(
        policy(RETENTION),
        create_request("logs.c", 3, configs=[("retention.bytes", str(2 * GIB))], principal=ALICE),
        state=state,
    )
    assert v.decision.message == (
        "[logs] logs uses 6GiB of its 10GiB retention bytes (partitions x retention.bytes); "
        "topic 'logs.c' would add 6GiB (12GiB > 10GiB)"
    )
    assert v.decision.budgets == (BudgetUse("logs", 6 * GIB, 6 * GIB, 10 * GIB, "retention_bytes"),)
    (alter,) = verdicts(
        policy(RETENTION),
        incremental_alter_configs_request(
            "logs.b", [("retention.bytes", "SET", str(3 * GIB))], principal=ALICE
        ),
        state=state,
    )
    # logs.b goes from 2 x 1 GiB to 2 x 3 GiB: 4 GiB more, 10 GiB in all: fits exactly.
    assert alter.decision.allowed
    assert alter.decision.budgets == (
        BudgetUse("logs", 6 * GIB, 4 * GIB, 10 * GIB, "retention_bytes"),
    )
    (lower,) = verdicts(
        policy(RETENTION),
        incremental_alter_configs_request(
            "logs.a", [("retention.bytes", "DELETE", None)], principal=ALICE
        ),
        state=state,
    )
    # A reset to the default is a change like any other: here it frees nothing, adds nothing.
    assert lower.decision.allowed and lower.decision.budgets == ()


def test_unlimited_retention_makes_usage_unlimited() -> None:
    state = cluster(topic("logs.a", 1, retention_bytes="-1"))
    (v,) = verdicts(
        policy(RETENTION),
        create_request("logs.b", 1, configs=[("retention.bytes", "1000")], principal=ALICE),
        state=state,
    )
    assert not v.decision.allowed
    assert "logs already uses unlimited retention bytes" in v.decision.message
    assert "topic 'logs.a' has retention.bytes -1" in v.decision.message
    assert v.decision.budgets == (BudgetUse("logs", None, 1000, 10 * GIB, "retention_bytes"),)
    # Setting -1 is unlimited too; so is the Kafka default where the broker sets none.
    (minus,) = verdicts(
        policy(RETENTION),
        create_request("logs.c", 1, configs=[("retention.bytes", "-1")], principal=ALICE),
    )
    assert "would make it unlimited (retention.bytes -1" in minus.decision.message
    (default,) = verdicts(policy(RETENTION), create_request("logs.c", 1, principal=ALICE))
    assert not default.decision.allowed and default.decision.budgets[0].added is None


def test_dry_run_and_audit_budgets_record_without_denying() -> None:
    p = load_policy(
        {
            "dry_run": True,
            "enforce": "nothing",
            "budgets": [{"name": "t", "topic_prefix": "t.", "max_topics": 1}],
        },
        "t",
    )
    (v,) = judge(
        p, [create_request("t.b", 1, principal=ALICE)], ClusterFacts(cluster(topic("t.a")))
    )
    assert v.decision.allowed and v.decision.violations[0].mode is Mode.AUDIT


def test_the_record_carries_the_budgets_and_validates() -> None:
    (v,) = verdicts(policy(PER_TEAM), create_request("team-a.x", 24, principal=TEAM_A))
    record = _record(v.request, v.decision)
    assert record["budgets"] == [
        {"name": "team-partitions", "usage": 0, "added": 24, "limit": 500, "unit": "partitions"}
    ]
    DecisionRecord.model_validate(record)


def test_facts_asked_for_and_replay_without_a_snapshot() -> None:
    p = policy(PER_TEAM, {**RETENTION, "principals": ["User:alice"]})
    judgement = Judgement(p, [create_request("team-a.x", 1, principal=TEAM_A)])
    assert judgement.query.facts == {Fact.BUDGET_USAGE, Fact.BROKER_DEFAULTS}
    assert judgement.query.scoped is None  # no retention budget judges it: no configs read
    scoped = Judgement(p, [create_request("logs.x", 1, principal=ALICE)]).query.scoped
    assert scoped is not None and scoped("logs.y") and not scoped("team-a.y")
    # Budget usage is cluster-wide: an audit event never holds it.
    request = create_request("team-a.x", 1, principal=TEAM_A)
    with pytest.raises(FactsNotRecorded, match="budget_usage"):
        RecordedFacts(request).read(judgement.query)
    # Outside every budget nothing more is read.
    assert Judgement(p, [create_request("other", 1, principal=TEAM_A)]).query.facts == set()


def test_budget_for_topic_maps_a_topic_to_its_budget() -> None:
    budgets = policy({"name": "payments", "topic": "pay[.].*", "max_topics": 5}, PER_TEAM).budgets
    assert budget_for_topic(budgets, "pay.x") == "payments"
    assert budget_for_topic(budgets, "team-a.orders") == "team-a"
    assert budget_for_topic(budgets, "nobody.orders") is None
    assert user_of("User:team-a") == "team-a" and user_of("Group:x") == "Group:x"


@pytest.mark.parametrize(
    ("budget", "key", "reason"),
    [
        ({"name": "b", "max_topics": 1}, (), "needs a key"),
        ({"name": "b", "topic_prefix": "a."}, (), "needs a limit"),
        ({"name": "b", "principals": ["User:x"], "max_topics": 1}, (), "cannot tell which"),
        ({"name": "b", "topic": "{user}.*", "max_topics": 1}, ("topic",), "placeholder"),
        (
            {"name": "b", "topic_prefix": "a.", "max_retention_bytes": "2XB"},
            ("max_retention_bytes",),
            "unknown unit",
        ),
        (
            {"name": "b", "topic_prefix": "a.", "max_topics": 1, "count_replicas": True},
            (),
            "count_replicas",
        ),
        ({"name": "B", "topic_prefix": "a.", "max_topics": 1}, ("name",), "pattern"),
    ],
)
def test_bad_budgets_are_refused_naming_the_key(
    budget: dict[str, Any], key: tuple[str, ...], reason: str
) -> None:
    with pytest.raises(PolicyError) as raised:
        policy(budget)
    (problem,) = raised.value.problems
    assert problem.path == ("budgets", 0, *key)
    assert reason in problem.reason


def test_a_budget_named_like_a_rule_is_refused() -> None:
    with pytest.raises(PolicyError, match="duplicate name 'x'"):
        load_policy(
            {
                "rules": [{"name": "x", "deny": True}],
                "budgets": [{"name": "x", "topic_prefix": "a.", "max_topics": 1}],
            },
            "t",
        )


def test_sizes_parse_as_configs_bounds_do() -> None:
    (budget,) = policy({"name": "b", "topic_prefix": "a.", "max_retention_bytes": "2TiB"}).budgets
    assert budget.spec.max_retention_bytes == 2 * 1024**4


def test_the_documented_budgets_give_the_documented_messages() -> None:
    doc = (Path(__file__).resolve().parents[3] / "docs" / "policy.md").read_text()
    section = doc.split("## Budgets per team or topic scope", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    p = load_policy(yaml.safe_load(block), "docs")
    tib, gib = 1024**4, 1024**3
    defaults = {"num.partitions": "1", "default.replication.factor": "3", "retention.bytes": "-1"}
    state = InMemoryCluster.of(
        [
            topic("team-a.ledger", 156),
            topic("payments.settlements", 12, 3),
            topic("logs.old", 3, retention_bytes=str(tib // 2)),
        ],
        3,
        defaults,
    )
    _, team = judge(
        p,
        [
            create_request("team-a.orders", 24, 3, principal=TEAM_A),
            create_request("team-a.refunds", 24, 3, principal=TEAM_A),
        ],
        ClusterFacts(state),
    )
    (payments,) = judge(
        p, [create_request("payments.refunds", 30, 3, principal=ALICE)], ClusterFacts(state)
    )
    (logs,) = judge(
        p,
        [
            create_request(
                "logs.a", 3, configs=[("retention.bytes", str(256 * gib))], principal=ALICE
            )
        ],
        ClusterFacts(state),
    )
    (unlimited,) = judge(p, [create_request("logs.b", 1, principal=ALICE)], ClusterFacts(state))
    for verdict in (team, payments, logs, unlimited):
        assert verdict.decision.message in doc, verdict.decision.message


def test_a_change_reads_only_the_budgets_it_can_move() -> None:
    both = policy(PER_TEAM, {"name": "bytes", "topic_prefix": "team-", "max_retention_bytes": 9})
    partitions_only = policy(PER_TEAM)
    retention = incremental_alter_configs_request(
        "team-a.x", [("retention.bytes", "SET", "5")], principal=TEAM_A
    )
    segment = incremental_alter_configs_request(
        "team-a.x", [("segment.ms", "SET", "600000")], principal=TEAM_A
    )
    grow = create_partitions_request("team-a.x", 6, principal=TEAM_A)
    # A partition budget cannot move on a config change: no cluster-wide read for it.
    assert Fact.BUDGET_USAGE not in Judgement(partitions_only, [segment]).query.facts
    assert Fact.BUDGET_USAGE in Judgement(partitions_only, [grow]).query.facts
    # A retention budget can (retention.bytes, or a reset to its default).
    assert Fact.BUDGET_USAGE in Judgement(both, [retention]).query.facts


@given(
    partitions=st.integers(-1, 9),
    replication=st.integers(-1, 4),
    retention=st.none() | st.sampled_from(["-1", "0", "1000", "x"]),
    defaults=st.sampled_from([{}, DEFAULTS, {**DEFAULTS, "retention.bytes": "500"}]),
)
def test_a_creates_change_is_that_of_the_state_it_requests(
    partitions: int, replication: int, retention: str | None, defaults: dict[str, str]
) -> None:
    """A create is counted without building its state: the same amounts as that state's."""
    configs = [] if retention is None else [("retention.bytes", retention)]
    request = resolve(
        create_request("team-a.t", partitions, replication, None, configs, principal=TEAM_A),
        InMemoryCluster(defaults=ConfigMap(defaults)),
        {Fact.BROKER_DEFAULTS},
    )
    base = dict(defaults)
    assert change(request, base) == _amounts(requested_state(request, base), base)
