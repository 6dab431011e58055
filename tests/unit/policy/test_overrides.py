"""Override actions: default, cap and force change a request before it is judged."""

from __future__ import annotations

from typing import Any

import pytest

from kafka_policy_proxy.policy.builders import (
    alter_configs_request,
    create_partitions_request,
    create_request,
    delete_topic_request,
    incremental_alter_configs_request,
)
from kafka_policy_proxy.policy.judge import ClusterFacts, Verdict, judge
from kafka_policy_proxy.policy.loader import PolicyError
from kafka_policy_proxy.policy.model import OverrideKind, TopicRequest
from tests.unit.policy.helpers import ALICE, DEFAULTS, cluster, compile_rules, topic

RETENTION = {"retention.ms": {"max": "7d", "cap": True}}
MIN_ISR = {"min.insync.replicas": {"required": True, "default": 2}}
COMPRESSION = {"compression.type": {"force": "zstd"}}
WEEK = "604800000"


def verdict(policy_rules: list[dict[str, Any]], request: TopicRequest, **top: Any) -> Verdict:
    policy = compile_rules(*policy_rules, **top)
    (found,) = judge(
        policy, [request], ClusterFacts(cluster(topic("orders.v1", retention_ms="1000")))
    )
    assert found.decision is not None
    return found


def changes(found: Verdict) -> list[tuple[str, str, str | None, str]]:
    assert found.decision is not None
    return [(o.kind.value, o.target, o.before, o.after) for o in found.decision.overrides]


def sent(found: Verdict) -> dict[str, str | None]:
    return {c.name: c.value for c in found.request.requested.changes}


def create(name: str = "orders.v2", partitions: int = 3, **configs: str) -> TopicRequest:
    pairs = [(k.replace("_", "."), v) for k, v in configs.items()]
    return create_request(name, partitions, 3, configs=pairs, principal=ALICE)


def test_a_default_fills_in_a_config_the_create_left_out() -> None:
    found = verdict([{"name": "isr", "configs": MIN_ISR}], create())
    assert found.decision is not None and found.decision.allowed
    assert changes(found) == [("default", "min.insync.replicas", None, "2")]
    assert sent(found) == {"min.insync.replicas": "2"}
    assert found.request.requested.configs["min.insync.replicas"] == "2"
    assert found.original is not None and sent(Verdict(found.original, None)) == {}
    given = verdict([{"name": "isr", "configs": MIN_ISR}], create(min_insync_replicas="3"))
    assert changes(given) == [] and given.original is None


def test_a_cap_sets_the_bound_on_creates_and_config_changes() -> None:
    rule = {"name": "retention", "configs": RETENTION}
    found = verdict([rule], create(retention_ms="999999999999"))
    assert found.decision is not None and found.decision.allowed
    assert changes(found) == [("cap", "retention.ms", "999999999999", WEEK)]
    unlimited = verdict([rule], create(retention_ms="-1"))
    assert changes(unlimited) == [("cap", "retention.ms", "-1", WEEK)]
    change = incremental_alter_configs_request(
        "orders.v1", [("retention.ms", "SET", "9000000000")], principal=ALICE
    )
    assert changes(verdict([rule], change)) == [("cap", "retention.ms", "9000000000", WEEK)]
    legacy = alter_configs_request("orders.v1", [("retention.ms", "9000000000")], principal=ALICE)
    assert changes(verdict([rule], legacy)) == [("cap", "retention.ms", "9000000000", WEEK)]
    within = verdict([rule], create(retention_ms="1000"))
    assert changes(within) == []


def test_partitions_are_capped_on_create_only_and_never_with_an_assignment() -> None:
    rule = {"name": "width", "partitions": {"min": 3, "max": 12, "cap": True}}
    assert changes(verdict([rule], create(partitions=64))) == [("cap", "partitions", "64", "12")]
    assert changes(verdict([rule], create(partitions=1))) == [("cap", "partitions", "1", "3")]
    placed = create_request(
        "orders.v2", assignment=[(p, [0, 1, 2]) for p in range(16)], principal=ALICE
    )
    denied = verdict([rule], placed)
    assert changes(denied) == [] and denied.decision is not None and not denied.decision.allowed
    increase = create_partitions_request("orders.v1", 64, principal=ALICE)
    grown = verdict([rule], increase)
    assert changes(grown) == [] and grown.decision is not None and not grown.decision.allowed


def test_force_sets_a_value_on_every_create_and_on_changes_that_name_it() -> None:
    rule = {"name": "zstd", "configs": COMPRESSION}
    assert changes(verdict([rule], create())) == [("force", "compression.type", None, "zstd")]
    assert changes(verdict([rule], create(compression_type="gzip"))) == [
        ("force", "compression.type", "gzip", "zstd")
    ]
    assert changes(verdict([rule], create(compression_type="zstd"))) == []
    named = incremental_alter_configs_request(
        "orders.v1", [("compression.type", "SET", "lz4")], principal=ALICE
    )
    assert changes(verdict([rule], named)) == [("force", "compression.type", "lz4", "zstd")]
    other = incremental_alter_configs_request(
        "orders.v1", [("retention.ms", "SET", "1000")], principal=ALICE
    )
    assert changes(verdict([rule], other)) == []
    removed = incremental_alter_configs_request(
        "orders.v1", [("compression.type", "DELETE", None)], principal=ALICE
    )
    assert changes(verdict([rule], removed)) == []


def test_a_full_replacement_that_leaves_a_config_out_gets_it_back() -> None:
    rules = [{"name": "zstd", "configs": COMPRESSION}, {"name": "isr", "configs": MIN_ISR}]
    legacy = alter_configs_request("orders.v1", [("retention.ms", "1000")], principal=ALICE)
    assert changes(verdict(rules, legacy)) == [
        ("force", "compression.type", None, "zstd"),
        ("default", "min.insync.replicas", None, "2"),
    ]
    incremental = incremental_alter_configs_request(
        "orders.v1", [("retention.ms", "SET", "1000")], principal=ALICE
    )
    assert changes(verdict(rules, incremental)) == []


def test_deletes_and_audit_rules_never_override() -> None:
    rule = {"name": "retention", "configs": RETENTION}
    gone = verdict([rule], delete_topic_request("orders.v1", principal=ALICE))
    assert changes(gone) == []
    audit = verdict(
        [{**rule, "mode": "audit"}], create(retention_ms="999999999999"), enforce="nothing"
    )
    assert audit.decision is not None and audit.decision.allowed and changes(audit) == []
    assert [v.rule for v in audit.decision.violations] == ["retention"]
    dry = verdict([rule], create(retention_ms="999999999999"), dry_run=True, enforce="nothing")
    assert changes(dry) == []


def test_only_selected_topics_and_principals_are_rewritten() -> None:
    rule = {"name": "zstd", "configs": COMPRESSION, "match": {"topic_prefix": "orders."}}
    assert changes(verdict([rule], create("payments.v1"))) == []
    assert changes(verdict([rule], create("orders.v3"))) != []
    skip_alice = {**rule, "match": {"except_principals": ["User:alice"]}}
    assert changes(verdict([skip_alice], create("orders.v3"))) == []


def test_the_rewritten_request_is_what_the_other_rules_judge() -> None:
    rules = [
        {"name": "retention", "configs": RETENTION},
        {"name": "naming", "name_pattern": "[a-z]+\\.v[0-9]+"},
    ]
    found = verdict(rules, create("Orders", retention_ms="999999999999"))
    assert found.decision is not None and not found.decision.allowed
    assert [v.rule for v in found.decision.violations] == ["naming"]
    assert changes(found) == [("cap", "retention.ms", "999999999999", WEEK)]
    assert found.decision.overrides[0].kind is OverrideKind.CAP


@pytest.mark.parametrize(
    ("rule", "where", "reason"),
    [
        (
            {"configs": {"retention.ms": {"cap": True}}},
            'configs."retention.ms".cap',
            "needs min or max",
        ),
        (
            {"configs": {"cleanup.policy": {"cap": True, "values": ["delete"]}}},
            'configs."cleanup.policy".cap',
            "needs a number",
        ),
        (
            {"configs": {"min.insync.replicas": {"default": 2, "force": 2}}},
            'configs."min.insync.replicas".force',
            "not both",
        ),
        (
            {"configs": {"min.insync.replicas": {"min": 2, "default": 1}}},
            'configs."min.insync.replicas".default',
            "outside this constraint's min/max",
        ),
        (
            {"configs": {"compression.type": {"values": ["zstd"], "force": "gzip"}}},
            'configs."compression.type".force',
            "not one of this constraint's values",
        ),
        (
            {"configs": {"segment.ms": {"forbidden": True, "default": 1}}},
            'configs."segment.ms".default',
            "forbidden",
        ),
        ({"partitions": {"min_increase": 1}}, "partitions.min_increase", "unknown key"),
        ({"partitions": {"max_increase": 2, "cap": True}}, "partitions.cap", "needs min or max"),
    ],
)
def test_an_override_that_cannot_work_is_refused(
    rule: dict[str, Any], where: str, reason: str
) -> None:
    with pytest.raises(PolicyError) as raised:
        compile_rules({"name": "r", **rule})
    [problem] = raised.value.problems
    assert problem.where == f"rules[0].{where}"
    assert reason in problem.reason


def test_defaults_in_the_cluster_do_not_count_as_named() -> None:
    # The broker default min.insync.replicas is 2 (DEFAULTS); the topic would inherit it, but
    # the rule sets it on the topic itself, where a later default change cannot reach it.
    assert DEFAULTS["min.insync.replicas"] == "2"
    found = verdict([{"name": "isr", "configs": {"min.insync.replicas": {"default": 3}}}], create())
    assert changes(found) == [("default", "min.insync.replicas", None, "3")]
