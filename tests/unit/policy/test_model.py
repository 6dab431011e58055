"""Requests, states and decisions: immutable, and exact JSON round-trips."""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass, fields

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_policy_proxy.policy import builders
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.model import (
    Action,
    ConfigMap,
    Decision,
    Fact,
    Mode,
    Principal,
    RequestedState,
    TopicRequest,
    Violation,
    assembler,
)

from .helpers import ALICE, cluster, compile_rules, topic

names = st.text(st.sampled_from("abc.-_XY9"), min_size=1, max_size=12)
values = st.one_of(st.none(), st.text(max_size=8))
configs = st.lists(st.tuples(st.sampled_from(["retention.ms", "cleanup.policy", "x"]), values))
principals = st.builds(Principal, st.sampled_from(["User:alice", "User:ANONYMOUS"]), names, names)
ops = st.sampled_from(["SET", "DELETE", "APPEND", "SUBTRACT"])
# The fields RequestedState's `__init__` takes (`named` is derived).
FIELDS = [f for f in fields(RequestedState) if f.init]


POLICY = compile_rules(
    {"name": "max-partitions", "partitions": {"max": 4}},
    {"name": "retention", "configs": {"retention.ms": {"max": "1d"}}},
)


@st.composite
def requests(draw: st.DrawFn) -> TopicRequest:
    who = draw(principals)
    name = draw(names)
    state = cluster(topic(name, partitions=draw(st.integers(1, 8))))
    bare = draw(
        st.one_of(
            st.builds(
                lambda p, r, c: builders.create_request(name, p, r, None, c, principal=who),
                st.integers(-1, 50),
                st.integers(-1, 5),
                configs,
            ),
            st.builds(lambda c: builders.alter_configs_request(name, c, principal=who), configs),
            st.builds(
                lambda c: builders.incremental_alter_configs_request(name, c, principal=who),
                st.lists(st.tuples(st.sampled_from(["retention.ms", "y"]), ops, values)),
            ),
            st.builds(
                lambda n: builders.create_partitions_request(name, n, principal=who),
                st.integers(1, 20),
            ),
            st.builds(
                lambda m: builders.reassignment_request(name, m, principal=who),
                st.lists(st.tuples(st.integers(0, 7), st.none() | st.lists(st.integers(0, 4)))),
            ),
            st.just(builders.delete_topic_request(name, principal=who)),
            st.builds(
                lambda o: builders.delete_records_request(name, o, principal=who),
                st.lists(st.tuples(st.integers(0, 7), st.integers(-1, 99))),
            ),
        )
    )
    return builders.resolve(bare, state, frozenset(Fact))


@given(requests())
def test_requests_round_trip_through_json_exactly(request: TopicRequest) -> None:
    text = json.dumps(request.to_dict())
    again = TopicRequest.from_dict(json.loads(text))
    assert again == request
    assert again.to_dict() == request.to_dict()
    assert hash(again) == hash(request)


@given(requests())
def test_decisions_round_trip_and_replay_gives_the_same_decision(request: TopicRequest) -> None:
    policy = POLICY
    state = cluster(topic(request.name))
    decision = policy.evaluate(request, state)
    replayed = policy.evaluate(
        TopicRequest.from_dict(json.loads(json.dumps(request.to_dict()))), state
    )
    assert replayed == decision
    assert Decision.from_dict(json.loads(json.dumps(decision.to_dict()))) == decision


def test_cluster_state_round_trips() -> None:
    state = cluster(topic("orders"), topic("__consumer_offsets"))
    again = InMemoryCluster.from_dict(json.loads(json.dumps(state.to_dict())))
    assert again == state
    assert again.topic_names() == {"orders"}
    assert again.topic_names(include_internal=True) == {"orders", "__consumer_offsets"}


def test_config_maps_are_immutable_hashable_and_picklable() -> None:
    configs = ConfigMap({"retention.ms": "1"})
    with pytest.raises(TypeError):
        configs["retention.ms"] = "2"  # type: ignore[index]
    with pytest.raises(TypeError):
        configs.update({"x": "y"})
    assert hash(configs) == hash(ConfigMap({"retention.ms": "1"}))
    assert pickle.loads(pickle.dumps(configs)) == configs


def test_decision_message_joins_only_enforced_violations() -> None:
    decision = Decision(
        "orders",
        Action.CREATE,
        False,
        (Violation("a", "[a] one"), Violation("b", "[b] two", Mode.AUDIT), Violation("c", "[c] 3")),
    )
    assert decision.message == "[a] one; [c] 3"


def test_requests_are_frozen() -> None:
    request = builders.delete_topic_request("orders", principal=ALICE)
    with pytest.raises(AttributeError):
        request.topic = "other"  # type: ignore[misc]


@given(requests())
def test_an_assembled_request_is_the_one_init_builds_derived_fields_too(
    request: TopicRequest,
) -> None:
    """`assembler` copies (what the builders and the judge fold facts with) skip `__init__`:
    they must still equal its result field by field, `name` and `named` included."""
    rebuilt = TopicRequest(
        request.topic,
        request.action,
        request.principal,
        request.topic_id,
        request.alter_kind,
        request.validate_only,
        RequestedState(**{f.name: getattr(request.requested, f.name) for f in FIELDS}),
        request.current,
        request.record_offsets,
        request.usage,
    )
    assert request == rebuilt
    assert request.name == rebuilt.name
    assert request.requested.named == rebuilt.requested.named
    assert pickle.loads(pickle.dumps(request)) == rebuilt


def test_folding_a_delete_by_id_gives_it_the_current_states_name() -> None:
    bare = builders.delete_topic_request(None, "id-1", principal=ALICE)
    current = topic("orders")
    folded = bare.folded(None, "id-1", bare.requested, current, None)
    assert folded.name == "orders"
    assert folded == TopicRequest(
        None, Action.DELETE, ALICE, "id-1", requested=bare.requested, current=current
    )


def test_assembled_objects_stay_frozen() -> None:
    make = assembler(Principal)
    principal = make("User:bob", "cli", "10.0.0.1")
    assert principal == Principal("User:bob", "cli", "10.0.0.1")
    with pytest.raises(AttributeError):
        principal.name = "User:eve"  # type: ignore[misc]


def test_only_slotted_dataclasses_are_assembled() -> None:
    @dataclass(frozen=True)
    class Plain:
        name: str

    with pytest.raises(TypeError, match="not a slotted dataclass"):
        assembler(Plain)
