"""Every rule kind on every action it covers, selectors, modes, ordering and `needs`."""

from __future__ import annotations

import pickle
import threading
from dataclasses import replace
from typing import Any

import pytest

from kafka_policy_proxy.policy import builders
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.model import (
    ConfigSource,
    Decision,
    Fact,
    Mode,
    Principal,
    TopicRequest,
)

from .helpers import ADMIN, ALICE, DEFAULTS, cluster, compile_rules, topic

ALL = frozenset(Fact)


def decide(policy: CompiledPolicy, bare: TopicRequest, state: InMemoryCluster) -> Decision:
    """What the proxy does: ask what is needed, resolve exactly that, evaluate."""
    return policy.evaluate(builders.resolve(bare, state, policy.needs(bare)), state)


def messages(decision: Decision) -> list[str]:
    return [v.message for v in decision.violations]


def create(
    name: str = "orders", partitions: int = 6, rf: int = 3, who: Principal = ALICE, **configs: str
) -> TopicRequest:
    pairs = [(k.replace("_", "."), v) for k, v in configs.items()]
    return builders.create_request(name, partitions, rf, None, pairs, principal=who)


def test_issue_message_format() -> None:
    policy = compile_rules({"name": "max-partitions", "partitions": {"max": 12}})
    decision = decide(policy, create(partitions=64), cluster())
    assert not decision.allowed
    assert messages(decision) == [
        "[max-partitions] topic 'orders' asks for 64 partitions; the limit is 12"
    ]


def test_partition_minimum_applies_to_the_broker_default_count() -> None:
    policy = compile_rules({"name": "min-partitions", "partitions": {"min": 3}})
    decision = decide(policy, create(partitions=-1), cluster())
    assert messages(decision) == [
        "[min-partitions] topic 'orders' asks for 1 partition; the minimum is 3"
    ]
    assert Fact.BROKER_DEFAULTS in policy.needs(create(partitions=-1))


def test_partition_bounds_and_increase_on_create_partitions() -> None:
    policy = compile_rules({"name": "parts", "partitions": {"max": 24, "max_increase": 4}})
    state = cluster(topic("orders", partitions=6))
    ok = builders.create_partitions_request("orders", 10, principal=ALICE)
    assert decide(policy, ok, state).allowed
    too_many = builders.create_partitions_request("orders", 30, principal=ALICE)
    assert messages(decide(policy, too_many, state)) == [
        "[parts] topic 'orders' asks for 30 partitions; the limit is 24",
        "[parts] topic 'orders' asks to grow from 6 to 30 partitions (+24); "
        "the largest increase allowed is 4",
    ]


def test_replication_bounds_on_create_and_reassignment() -> None:
    policy = compile_rules({"name": "rf", "replication": {"min": 3, "max": 3}})
    state = cluster(topic("orders", partitions=2))
    assert messages(decide(policy, create(rf=2), state)) == [
        "[rf] topic 'orders' asks for replication factor 2; the minimum is 3"
    ]
    shrink = builders.reassignment_request("orders", [(0, [1, 2])], principal=ALICE)
    assert not decide(policy, shrink, state).allowed
    move = builders.reassignment_request("orders", [(0, [4, 5, 6])], principal=ALICE)
    assert decide(policy, move, state).allowed


def test_explicit_assignment_can_be_refused() -> None:
    policy = compile_rules({"name": "placement", "replication": {"explicit_assignment": False}})
    placed = builders.create_request("orders", assignment=[(0, [1, 2, 3])], principal=ALICE)
    assert not decide(policy, placed, cluster()).allowed
    assert decide(policy, create(), cluster()).allowed
    grow = builders.create_partitions_request("orders", 8, [[1, 2, 3]], principal=ALICE)
    assert not decide(policy, grow, cluster(topic("orders", partitions=7))).allowed


def test_name_pattern_matches_the_whole_exact_name() -> None:
    policy = compile_rules({"name": "naming", "name_pattern": "[a-z]+\\.v[0-9]+"})
    assert decide(policy, create("orders.v1"), cluster()).allowed
    # A pattern that only matches a prefix must not let a suffix through, and case matters.
    assert not decide(policy, create("orders.v1.EVIL"), cluster()).allowed
    assert not decide(policy, create("Orders.v1"), cluster()).allowed
    # Naming applies to new topics only: existing ones stay deletable.
    assert decide(
        policy, builders.delete_topic_request("Legacy", principal=ALICE), cluster()
    ).allowed


def test_dot_underscore_collision_with_an_existing_topic() -> None:
    policy = compile_rules({"name": "collision", "name_collision": True})
    state = cluster(topic("orders.v1"))
    assert messages(decide(policy, create("orders_v1"), state)) == [
        "[collision] topic 'orders_v1' collides with existing topic 'orders.v1': "
        "'.' and '_' map to the same metric name"
    ]
    assert decide(policy, create("orders.v2"), state).allowed
    # The proxy is told to fetch topic names for this rule.
    assert Fact.TOPIC_NAMES in policy.needs(create("orders_v1"))
    # A later snapshot with a new name set is honoured (the index is rebuilt).
    assert not decide(policy, create("a.b"), cluster(topic("a_b"))).allowed


@pytest.mark.parametrize(
    ("constraint", "configs", "message"),
    [
        (
            {"max": "7d"},
            {"retention.ms": "2592000000"},
            "[c] topic 'orders' sets retention.ms to 2592000000 (30d); the limit is 604800000 (7d)",
        ),
        (
            {"min": "1h"},
            {"retention.ms": "60000"},
            "[c] topic 'orders' sets retention.ms to 60000 (1m); the minimum is 3600000 (1h)",
        ),
        (
            {"max": "7d"},
            {"retention.ms": "-1"},
            "[c] topic 'orders' sets retention.ms to -1 (unlimited); the limit is 604800000 (7d)",
        ),
        (
            {"max": "7d"},
            {"retention.ms": "soon"},
            "[c] topic 'orders' sets retention.ms to 'soon', which is not a duration",
        ),
    ],
)
def test_config_bounds(constraint: dict[str, Any], configs: dict[str, str], message: str) -> None:
    policy = compile_rules({"name": "c", "configs": {"retention.ms": constraint}})
    request = builders.create_request("orders", 6, 3, None, configs.items(), principal=ALICE)
    assert messages(decide(policy, request, cluster())) == [message]


def test_config_bounds_check_the_broker_default_on_create() -> None:
    policy = compile_rules({"name": "c", "configs": {"retention.ms": {"max": "1d"}}})
    assert messages(decide(policy, create(), cluster())) == [
        "[c] topic 'orders' gets the broker default retention.ms = 604800000 (7d); "
        "the limit is 86400000 (1d)"
    ]


def test_a_snapshot_request_is_judged_on_values_only() -> None:
    """A scanned topic whose snapshot lacks config_sources: nothing says what was set on it."""
    policy = compile_rules(
        {
            "name": "c",
            "configs": {
                "retention.ms": {"max": "1d"},
                "cleanup.policy": {"required": True},
                "unclean.leader.election.enable": {"forbidden": True},
            },
        }
    )
    configs = {"retention.ms": "604800000", "unclean.leader.election.enable": "true"}
    request = builders.create_request("orders", 6, 3, None, configs.items(), principal=ALICE)
    assert len(messages(decide(policy, request, cluster()))) == 3
    scanned = replace(
        request, requested=replace(request.requested, config_source=ConfigSource.SNAPSHOT)
    )
    assert messages(decide(policy, scanned, cluster())) == [
        "[c] topic 'orders' has retention.ms = 604800000 (7d); the limit is 86400000 (1d)"
    ]


def test_alter_checks_only_what_it_changes() -> None:
    policy = compile_rules({"name": "c", "configs": {"retention.ms": {"max": "1d"}}})
    legacy = cluster(topic("orders", retention_ms="2592000000"))
    touch_other = builders.incremental_alter_configs_request(
        "orders", [("segment.ms", "SET", "3600000")], principal=ALICE
    )
    assert decide(policy, touch_other, legacy).allowed
    # AlterConfigs without retention.ms resets it to the (too long) default: that is a change.
    replace = builders.alter_configs_request("orders", [("segment.ms", "1")], principal=ALICE)
    assert messages(decide(policy, replace, cluster(topic("orders", retention_ms="1000")))) == [
        "[c] topic 'orders' resets retention.ms to its default 604800000 (7d); "
        "the limit is 86400000 (1d)"
    ]


def test_allowed_values_and_pattern_typed_lists() -> None:
    policy = compile_rules(
        {
            "name": "c",
            "configs": {
                "cleanup.policy": {"values": ["delete", "compact"]},
                "compression.type": {"pattern": "zstd|lz4"},
            },
        }
    )
    ok = builders.create_request(
        "orders",
        6,
        3,
        None,
        [("cleanup.policy", "compact,delete"), ("compression.type", "lz4")],
        principal=ALICE,
    )
    assert decide(policy, ok, cluster()).allowed
    bad = builders.create_request(
        "orders",
        6,
        3,
        None,
        [("cleanup.policy", "compact,purge"), ("compression.type", "gzip")],
        principal=ALICE,
    )
    assert messages(decide(policy, bad, cluster())) == [
        "[c] topic 'orders' sets cleanup.policy to 'compact,purge'; "
        "allowed values are 'compact', 'delete'",
        "[c] topic 'orders' sets compression.type to 'gzip', which does not match 'zstd|lz4'",
    ]


def test_required_forbidden_and_immutable() -> None:
    policy = compile_rules(
        {
            "name": "c",
            "configs": {
                "retention.ms": {"required": True},
                "unclean.leader.election.enable": {"forbidden": True},
                "cleanup.policy": {"immutable": True},
            },
        }
    )
    state = cluster(topic("orders", retention_ms="3600000"))
    assert messages(decide(policy, create(unclean_leader_election_enable="true"), state)) == [
        "[c] topic 'orders' does not set retention.ms; it must be set",
        "[c] topic 'orders' sets unclean.leader.election.enable, which may not be set",
    ]
    reset = builders.incremental_alter_configs_request(
        "orders",
        [("retention.ms", "DELETE", None), ("cleanup.policy", "SET", "compact")],
        principal=ALICE,
    )
    assert messages(decide(policy, reset, state)) == [
        "[c] topic 'orders' resets retention.ms to its default; it must be set",
        "[c] topic 'orders' changes cleanup.policy from 'delete' to 'compact'; "
        "it cannot change after the topic is created",
    ]
    same = builders.incremental_alter_configs_request(
        "orders", [("cleanup.policy", "SET", "delete")], principal=ALICE
    )
    assert decide(policy, same, state).allowed


def test_deny_protects_topics_per_action() -> None:
    policy = compile_rules(
        {
            "name": "protected",
            "match": {"topic": "payments\\..+", "actions": ["delete", "delete_records"]},
            "deny": True,
            "message": "ask #data-platform",
        }
    )
    state = cluster(topic("payments.ledger"))
    delete = builders.delete_topic_request("payments.ledger", principal=ADMIN)
    assert messages(decide(policy, delete, state)) == [
        "[protected] topic 'payments.ledger' may not be deleted (ask #data-platform)"
    ]
    purge = builders.delete_records_request("payments.ledger", [(0, -1)], principal=ALICE)
    assert messages(decide(policy, purge, state)) == [
        "[protected] topic 'payments.ledger' may not have records deleted (ask #data-platform)"
    ]
    alter = builders.incremental_alter_configs_request(
        "payments.ledger", [("segment.ms", "SET", "1")], principal=ALICE
    )
    assert decide(policy, alter, state).allowed
    assert decide(policy, builders.delete_topic_request("payments", principal=ALICE), state).allowed


def test_deny_by_alter_kind() -> None:
    policy = compile_rules(
        {"name": "no-moves", "match": {"actions": ["alter:reassignment"]}, "deny": True}
    )
    state = cluster(topic("orders"))
    move = builders.reassignment_request("orders", [(0, [1, 2, 3])], principal=ALICE)
    assert not decide(policy, move, state).allowed
    grow = builders.create_partitions_request("orders", 8, principal=ALICE)
    assert decide(policy, grow, state).allowed


def test_cluster_budgets() -> None:
    policy = compile_rules(
        {
            "name": "budget",
            "cluster": {
                "max_total_partitions": 20,
                "max_partitions_per_broker": 6,
                "max_topics": 2,
            },
        }
    )
    state = cluster(topic("a", partitions=6), topic("b", partitions=6), brokers=3)
    assert messages(decide(policy, create("c", partitions=12), state)) == [
        "[budget] topic 'c' would bring the cluster to 24 partitions; the budget is 20",
        "[budget] topic 'c' would bring the cluster to 8 partitions per broker (3 brokers); "
        "the limit is 6",
        "[budget] topic 'c' would be topic number 3; the limit is 2 topics",
    ]
    grow = builders.create_partitions_request("a", 8, principal=ALICE)
    assert decide(policy, grow, state).allowed  # 14 partitions, under both budgets
    assert {Fact.TOTAL_PARTITIONS, Fact.BROKER_COUNT, Fact.TOPIC_STATE} <= policy.needs(grow)


def test_selectors_principals_globs_exceptions_and_client_ids() -> None:
    policy = compile_rules(
        {
            "name": "svc",
            "match": {
                "principals": ["User:svc-*", "User:bob"],
                "except_principals": ["User:svc-admin"],
                "client_ids": ["batch-*"],
            },
            "partitions": {"max": 4},
        }
    )

    def who(name: str, client: str) -> bool:
        return decide(policy, create(partitions=8, who=Principal(name, client)), cluster()).allowed

    assert not who("User:svc-orders", "batch-1")
    assert not who("User:bob", "batch-x")
    assert who("User:svc-admin", "batch-1")  # excepted
    assert who("User:svc-orders", "web-1")  # other client
    assert who("User:alice", "batch-1")  # not selected


def test_topic_prefix_and_regex_together() -> None:
    policy = compile_rules(
        {
            "name": "r",
            "match": {"topic_prefix": "team.", "topic": ".*\\.tmp"},
            "partitions": {"max": 1},
        }
    )
    assert not decide(policy, create("team.x.tmp", partitions=2), cluster()).allowed
    assert decide(policy, create("other.x.tmp", partitions=2), cluster()).allowed
    assert decide(policy, create("team.x.log", partitions=2), cluster()).allowed


def test_internal_topics_are_excluded_unless_a_rule_opts_in() -> None:
    deny_all = {"name": "deny", "match": {"actions": ["delete_records"]}, "deny": True}
    state = InMemoryCluster.of([topic("__consumer_offsets")], 3, DEFAULTS)
    purge = builders.delete_records_request("__consumer_offsets", [(0, -1)], principal=ALICE)
    assert decide(compile_rules(deny_all), purge, state).allowed
    opted_in = {**deny_all, "match": {"actions": ["delete_records"], "internal": True}}
    assert not decide(compile_rules(opted_in), purge, state).allowed


def test_all_violations_in_declaration_order_and_audit_mode() -> None:
    policy = compile_rules(
        {"name": "first", "mode": "audit", "partitions": {"max": 4}},
        {"name": "second", "replication": {"min": 3}},
        {"name": "third", "partitions": {"max": 6}},
    )
    decision = decide(policy, create(partitions=8, rf=1), cluster())
    assert [(v.rule, v.mode) for v in decision.violations] == [
        ("first", Mode.AUDIT),
        ("second", Mode.ENFORCE),
        ("third", Mode.ENFORCE),
    ]
    assert not decision.allowed
    audit_only = decide(policy, create(partitions=5, rf=3), cluster())
    assert audit_only.allowed
    assert [v.rule for v in audit_only.violations] == ["first"]


def test_dry_run_puts_every_rule_in_audit_mode() -> None:
    policy = compile_rules(
        {"name": "max", "partitions": {"max": 4}}, dry_run=True, enforce="nothing"
    )
    decision = decide(policy, create(partitions=8), cluster())
    assert decision.allowed
    assert decision.mode is Mode.AUDIT
    assert [v.mode for v in decision.violations] == [Mode.AUDIT]


def test_unknown_topic_id_fails_closed() -> None:
    policy = compile_rules({"name": "x", "partitions": {"max": 4}})
    bare = builders.delete_topic_request(None, "nope", principal=ALICE)
    assert Fact.TOPIC_STATE in policy.needs(bare)
    decision = decide(policy, bare, cluster())
    assert not decision.allowed
    assert decision.violations[0].rule == "unknown-topic"


def test_needs_only_what_selected_rules_read() -> None:
    policy = compile_rules(
        {"name": "protected", "match": {"topic": "payments\\..+"}, "deny": True},
        {
            "name": "retention",
            "match": {"topic_prefix": "logs."},
            "configs": {"retention.ms": {"max": "1d"}},
        },
    )
    assert policy.needs(builders.delete_topic_request("payments.x", principal=ALICE)) == set()
    assert policy.needs(create("logs.x")) == {Fact.BROKER_DEFAULTS}
    assert policy.needs(create("orders")) == set()


def test_compiled_policy_pickles_and_evaluates_the_same() -> None:
    policy = compile_rules(
        {"name": "max", "partitions": {"max": 4}}, {"name": "c", "name_collision": True}
    )
    state = cluster(topic("a.b"))
    again = pickle.loads(pickle.dumps(policy))
    for request in (create("a_b", partitions=8), create("ok", partitions=2)):
        assert again.evaluate(request, state) == policy.evaluate(request, state)


def test_evaluation_is_thread_safe() -> None:
    policy = compile_rules(
        {"name": "max", "partitions": {"max": 4}},
        {"name": "c", "configs": {"retention.ms": {"max": "1d"}}},
    )
    state = cluster()
    requests = [
        builders.resolve(
            create(f"t{i}", partitions=i % 8 + 1, retention_ms=str(i * 3_600_000)), state, ALL
        )
        for i in range(200)
    ]
    expected = [policy.evaluate(r, state) for r in requests]
    results: list[list[Decision]] = []

    def work() -> None:
        results.append([policy.evaluate(r, state) for r in requests])

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r == expected for r in results)
