"""Name collisions among the new names of one batch: the first is kept, later ones are denied."""

from __future__ import annotations

import pytest

from kafka_policy_proxy.policy import builders
from kafka_policy_proxy.policy.batch import BatchCluster, with_new_names
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.judge import ClusterFacts, judge
from kafka_policy_proxy.policy.model import TopicRequest
from kafka_policy_proxy.policy.offline.scenario import evaluate_spec, parse_request

from .helpers import ALICE, cluster, compile_rules, topic

COLLISION = {"name": "collision", "name_collision": True}


def create(name: str) -> TopicRequest:
    return builders.create_request(name, 3, 3, None, [], principal=ALICE)


def outcome(
    policy: CompiledPolicy, names: list[str], state: InMemoryCluster | None = None
) -> list[tuple[str, bool, list[str]]]:
    verdicts = judge(policy, [create(n) for n in names], ClusterFacts(state or cluster()))
    return [
        (v.request.name, v.decision.allowed, [x.message for x in v.decision.violations])
        for v in verdicts
        if v.decision is not None
    ]


def later(name: str, first: str) -> str:
    return (
        f"[collision] topic {name!r} collides with topic {first!r}, requested before it in the "
        "same request: '.' and '_' map to the same metric name; only the first of them may be "
        "created"
    )


@pytest.mark.parametrize(("first", "second"), [("a.b", "a_b"), ("a_b", "a.b")])
def test_the_later_of_two_colliding_new_names_is_denied(first: str, second: str) -> None:
    policy = compile_rules(COLLISION)
    assert outcome(policy, [first, second]) == [
        (first, True, []),
        (second, False, [later(second, first)]),
    ]


def test_every_later_variant_names_the_first() -> None:
    policy = compile_rules(COLLISION)
    names = ["x", "a_b.c", "a.b.c", "a.b_c", "a_b_c", "y.z"]
    result = outcome(policy, names)
    assert [(n, ok) for n, ok, _ in result] == [
        ("x", True),
        ("a_b.c", True),
        ("a.b.c", False),
        ("a.b_c", False),
        ("a_b_c", False),
        ("y.z", True),
    ]
    assert result[3][2] == [later("a.b_c", "a_b.c")]


def test_an_exact_duplicate_is_left_to_the_broker() -> None:
    # The broker refuses every copy of a repeated name with INVALID_REQUEST; the policy does not
    # invent a second verdict for it. A later colliding name is still denied.
    policy = compile_rules(COLLISION)
    assert outcome(policy, ["a.b", "a.b"]) == [("a.b", True, []), ("a.b", True, [])]
    assert [ok for _, ok, _ in outcome(policy, ["a.b", "a_b", "a.b", "a_b"])] == [
        True,
        False,
        True,
        False,
    ]


def test_case_is_not_a_collision() -> None:
    # Kafka keeps `Orders` and `orders` apart (metric names too); lower-case names are a
    # naming rule (`name_pattern`), not a collision.
    policy = compile_rules(COLLISION)
    assert [ok for _, ok, _ in outcome(policy, ["Orders.v1", "orders_v1", "ORDERS_V1"])] == [
        True,
        True,
        True,
    ]


def test_an_existing_topic_comes_before_the_batch() -> None:
    policy = compile_rules(COLLISION)
    result = outcome(policy, ["a.b", "a_b"], cluster(topic("a-b"), topic("a_b")))
    assert result[0][1] is False and "existing topic 'a_b'" in result[0][2][0]
    # `a_b` itself exists: the broker answers TOPIC_ALREADY_EXISTS; it collides with `a.b`.
    assert result[1] == ("a_b", False, [later("a_b", "a.b")])


def test_only_rules_that_ask_and_select_the_name_deny_it() -> None:
    assert [
        ok
        for _, ok, _ in outcome(
            compile_rules({"name": "d", "deny": True, "match": {"topic": "zz"}}), ["a.b", "a_b"]
        )
    ] == [True, True]
    scoped = compile_rules({**COLLISION, "match": {"topic_prefix": "pay"}})
    assert [ok for _, ok, _ in outcome(scoped, ["a.b", "a_b", "pay.x", "pay_x"])] == [
        True,
        True,
        True,
        False,
    ]
    audit = compile_rules(
        {**COLLISION, "mode": "audit"}, {"name": "d", "deny": True, "match": {"topic": "zz"}}
    )
    assert outcome(audit, ["a.b", "a_b"])[1][1] is True


def test_batches_without_a_colliding_pair_are_judged_on_the_cluster_itself() -> None:
    state = cluster()
    assert with_new_names(state, [create("a.b"), create("c_d"), create("a.b")]) is state
    wrapped = with_new_names(state, [create("a.b"), create("a_b")])
    assert isinstance(wrapped, BatchCluster)
    assert wrapped.topic_names() == state.topic_names()
    # Deletes are not new names.
    delete = builders.delete_topic_request("a_b", principal=ALICE)
    assert with_new_names(state, [create("a.b"), delete]) is state


def test_policy_eval_judges_the_request_as_one_batch() -> None:
    spec = parse_request(
        "operation: create_topics\nprincipal: User:alice\n"
        "topics:\n  - {name: m.x, partitions: 3, replication_factor: 3}\n"
        "  - {name: m_x, partitions: 3, replication_factor: 3}\n",
        "req.yaml",
    )
    verdicts = evaluate_spec(compile_rules(COLLISION), spec, cluster())
    assert [(v.request.name, v.decision and v.decision.allowed) for v in verdicts] == [
        ("m.x", True),
        ("m_x", False),
    ]
