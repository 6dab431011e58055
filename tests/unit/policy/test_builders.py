"""The builders the proxy calls with wire data, and `resolve` for facts fetched later."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_policy_proxy.policy import builders
from kafka_policy_proxy.policy.model import (
    Action,
    AlterKind,
    ConfigChange,
    ConfigOp,
    ConfigSource,
    Fact,
    RequestedState,
    TopicRequest,
    freeze_assignment,
)

from .helpers import ALICE, DEFAULTS, cluster, topic

ALL = frozenset(Fact)


def test_create_resolves_minus_one_from_broker_defaults() -> None:
    bare = builders.create_request("orders", -1, -1, None, [("retention.ms", "1")], principal=ALICE)
    assert bare.requested.partitions is None
    assert bare.requested.replication_factor is None
    assert bare.requested.configs == {"retention.ms": "1"}
    resolved = builders.resolve(bare, cluster(), ALL)
    assert resolved.requested.partitions == 1
    assert resolved.requested.replication_factor == 3
    assert resolved.requested.configs["retention.ms"] == "1"
    assert resolved.requested.configs["cleanup.policy"] == "delete"
    # Broker settings used for -1 are not topic configs.
    assert "num.partitions" not in resolved.requested.configs
    assert resolved.current is None


def test_create_with_explicit_assignment_takes_counts_from_it() -> None:
    request = builders.create_request(
        "orders", -1, -1, [(1, [2, 3, 1]), (0, [1, 2, 3])], principal=ALICE
    )
    assert request.requested.partitions == 2
    assert request.requested.replication_factor == 3
    assert request.requested.assignment == ((0, (1, 2, 3)), (1, (2, 3, 1)))
    assert not request.requested.generated_assignment


def test_resolve_gives_the_same_request_as_building_with_the_facts() -> None:
    state = cluster(topic("orders", retention_ms="3600000"))
    current = state.topic("orders")
    changes = [("retention.ms", "DELETE", None), ("cleanup.policy", "APPEND", "compact")]
    bare = builders.incremental_alter_configs_request("orders", changes, principal=ALICE)
    direct = builders.incremental_alter_configs_request(
        "orders", changes, principal=ALICE, current=current, defaults=DEFAULTS
    )
    assert builders.resolve(bare, state, ALL) == direct
    assert direct.requested.configs["retention.ms"] == "604800000"
    assert direct.requested.configs["cleanup.policy"] == "delete,compact"
    assert direct.requested.config_source is ConfigSource.INCREMENTAL
    assert [c.op for c in direct.requested.changes] == [ConfigOp.DELETE, ConfigOp.APPEND]


def test_resolve_reads_only_the_facts_asked_for() -> None:
    state = cluster(topic("orders"))
    bare = builders.alter_configs_request("orders", [("segment.ms", "1000")], principal=ALICE)
    only_state = builders.resolve(bare, state, {Fact.TOPIC_STATE})
    assert only_state.current == state.topic("orders")
    assert only_state.requested.configs == {"segment.ms": "1000"}  # defaults not fetched


def test_alter_configs_replaces_everything() -> None:
    state = cluster(topic("orders", retention_ms="3600000", cleanup_policy="compact"))
    request = builders.resolve(
        builders.alter_configs_request("orders", [("segment.ms", "1000")], principal=ALICE),
        state,
        ALL,
    )
    assert request.requested.configs["retention.ms"] == "604800000"
    assert request.requested.configs["cleanup.policy"] == "delete"
    assert request.requested.configs["segment.ms"] == "1000"
    assert request.alter_kind is AlterKind.CONFIGS


def test_create_partitions_numbers_new_partitions_after_the_existing_ones() -> None:
    state = cluster(topic("orders", partitions=6))
    request = builders.resolve(
        builders.create_partitions_request("orders", 8, [[1, 2, 3], [2, 3, 1]], principal=ALICE),
        state,
        ALL,
    )
    assert request.requested.partitions == 8
    assert request.requested.assignment == ((6, (1, 2, 3)), (7, (2, 3, 1)))
    assert request.requested.replication_factor == 3
    assert request.current is not None and request.current.partitions == 6


def test_reassignment_merges_moves_into_the_current_assignment_and_drops_cancels() -> None:
    state = cluster(topic("orders", partitions=3))
    request = builders.resolve(
        builders.reassignment_request("orders", [(0, [5, 6]), (1, None)], principal=ALICE),
        state,
        ALL,
    )
    assignment = dict(request.requested.assignment)
    assert assignment[0] == (5, 6)
    assert assignment[1] == state.topic("orders").assignment[1][1]  # type: ignore[union-attr]
    assert request.requested.replication_factor == 2  # the weakest partition


def test_delete_by_topic_id_learns_the_name_from_the_cluster() -> None:
    state = cluster(topic("orders"))
    bare = builders.delete_topic_request(None, "id-orders", principal=ALICE)
    assert bare.name == ""
    resolved = builders.resolve(bare, state, {Fact.TOPIC_STATE})
    assert resolved.topic == "orders"
    assert resolved.name == "orders"


def test_delete_accepts_a_uuid_topic_id() -> None:
    topic_id = uuid.UUID(int=7)
    request = builders.delete_topic_request(None, topic_id, principal=ALICE)
    assert request.topic_id == str(topic_id)


def test_delete_records_keeps_offsets_sorted_by_partition() -> None:
    request = builders.delete_records_request("orders", [(2, -1), (0, 10)], principal=ALICE)
    assert request.action is Action.DELETE_RECORDS
    assert request.record_offsets == ((0, 10), (2, -1))


@settings(max_examples=200, deadline=None)
@given(
    partitions=st.integers(-1, 50),
    replication=st.integers(-1, 5),
    assignment=st.lists(st.tuples(st.integers(0, 9), st.lists(st.integers(1, 5), min_size=1))),
    configs=st.lists(st.tuples(st.sampled_from(["a", "b", "retention.ms"]), st.none() | st.text())),
    defaults=st.none() | st.just(DEFAULTS),
    validate_only=st.booleans(),
)
def test_a_create_is_built_once_as_the_facts_would_rebuild_it(
    *,
    partitions: int,
    replication: int,
    assignment: list[tuple[int, list[int]]],
    configs: list[tuple[str, str | None]],
    defaults: Any,
    validate_only: bool,
) -> None:
    """create_request builds in one step what its request, rebuilt with the facts, would be."""
    built = builders.create_request(
        "t", partitions, replication, assignment, configs,
        principal=ALICE, validate_only=validate_only, defaults=defaults,
    )  # fmt: skip
    frozen = freeze_assignment(assignment)
    raw = TopicRequest(
        topic="t",
        action=Action.CREATE,
        principal=ALICE,
        validate_only=validate_only,
        requested=RequestedState(
            partitions=len(frozen) if frozen else None if partitions < 0 else partitions,
            replication_factor=len(frozen[0][1])
            if frozen
            else None
            if replication < 0
            else replication,
            assignment=frozen,
            generated_assignment=not frozen,
            changes=tuple(ConfigChange(n, ConfigOp.SET, v) for n, v in configs),
            config_source=ConfigSource.CREATE,
        ),
    )
    assert built == builders._with_facts(raw, None, defaults)
    assert built.requested.named == builders._with_facts(raw, None, defaults).requested.named


def _bare_requests() -> list[TopicRequest]:
    """One request of every kind, unresolved, two creates naming the same configs."""
    same = [("retention.ms", "1"), ("cleanup.policy", None)]
    return [
        builders.create_request("a", -1, -1, None, same, principal=ALICE),
        builders.create_request("b", 2, 1, None, same, principal=ALICE),
        builders.create_request("c", -1, 3, None, [("retention.ms", "2")], principal=ALICE),
        builders.alter_configs_request("orders", same, principal=ALICE),
        builders.incremental_alter_configs_request(
            "orders", [("retention.ms", "DELETE", None)], principal=ALICE
        ),
        builders.create_partitions_request("orders", 9, principal=ALICE),
        builders.reassignment_request("orders", [(0, [1, 2])], principal=ALICE),
        builders.delete_topic_request(None, "id-orders", principal=ALICE),
        builders.delete_topic_request("gone", principal=ALICE),
        builders.delete_records_request("orders", [(0, 5)], principal=ALICE),
    ]


@given(facts=st.sets(st.sampled_from(sorted(Fact))))
def test_a_batch_folder_gives_each_request_what_resolve_gives(facts: set[Fact]) -> None:
    """The judge folds a batch's facts with one FactFolder: per request, exactly `resolve`,
    the derived `name` and `named` too."""
    state = cluster(topic("orders"))
    fold = builders.FactFolder(state, facts)
    for bare in _bare_requests():
        folded, resolved = fold(bare), builders.resolve(bare, state, facts)
        assert folded == resolved
        assert folded.name == resolved.name
        assert folded.requested.named == resolved.requested.named


def test_creates_naming_the_same_configs_share_one_config_map() -> None:
    fold = builders.FactFolder(cluster(), ALL)
    first, second, third = (fold(r) for r in _bare_requests()[:3])
    assert first.requested.configs is second.requested.configs
    topic_defaults = {k: v for k, v in DEFAULTS.items() if k not in builders.BROKER_ONLY_DEFAULTS}
    assert first.requested.configs == {**topic_defaults, "retention.ms": "1"}
    assert third.requested.configs["retention.ms"] == "2"


def test_creates_naming_the_same_configs_as_the_one_before_share_its_changes() -> None:
    """A batch's creates often name the same configs: built once, and one naming others
    in between gets its own."""
    same = [("retention.ms", "1"), ("cleanup.policy", None)]
    first, other, again = (
        builders.create_request(name, 3, 3, None, configs, principal=ALICE)
        for name, configs in [("a", same), ("b", [("retention.ms", "2")]), ("c", list(same))]
    )
    assert other.requested.configs == {"retention.ms": "2"}
    assert other.requested.named == {"retention.ms"}
    assert again.requested.changes == first.requested.changes
    assert again.requested.named == {"retention.ms", "cleanup.policy"}
    assert again.requested.configs == {"retention.ms": "1"}
    repeat = builders.create_request("d", 3, 3, None, same, principal=ALICE)
    assert repeat.requested.changes is again.requested.changes
