"""A topic's state after an accepted config change: known where the request tells it, else None."""

from __future__ import annotations

from kafka_policy_proxy.policy.builders import (
    alter_configs_request,
    create_partitions_request,
    incremental_alter_configs_request,
)
from kafka_policy_proxy.policy.model import ConfigMap, Override, OverrideKind, Principal, TopicState
from kafka_policy_proxy.proxy.filters.changed_state import state_after

ORDERS = TopicState(
    "orders",
    topic_id="7d0d4a3c-0000-4000-8000-000000000001",
    partitions=3,
    replication_factor=3,
    configs=ConfigMap(
        {"retention.ms": "86400000", "cleanup.policy": "delete", "segment.ms": "604800000"}
    ),
    overrides=frozenset({"retention.ms"}),
)
WHO = Principal()


def test_sets_apply_over_the_effective_configs_and_become_overrides() -> None:
    request = incremental_alter_configs_request(
        "orders", [("segment.ms", "SET", "60000")], principal=WHO, current=ORDERS
    )
    state = state_after(request, ())
    assert state is not None
    assert state.configs == {**ORDERS.configs, "segment.ms": "60000"}
    assert state.overrides == {"retention.ms", "segment.ms"}
    assert (state.topic_id, state.partitions) == (ORDERS.topic_id, 3)


def test_a_value_a_rule_rewrote_is_the_value_cached() -> None:
    request = incremental_alter_configs_request(
        "orders", [("retention.ms", "SET", "1")], principal=WHO, current=ORDERS
    )
    rewrite = Override("floor", OverrideKind.CAP, "retention.ms", "1", "3600000")
    state = state_after(request, (rewrite,))
    assert state is not None and state.configs["retention.ms"] == "3600000"


def test_deletes_appends_and_subtracts_are_not_guessed() -> None:
    for op in ("DELETE", "APPEND", "SUBTRACT"):
        value = None if op == "DELETE" else "compact"
        request = incremental_alter_configs_request(
            "orders", [("cleanup.policy", op, value)], principal=WHO, current=ORDERS
        )
        assert state_after(request, ()) is None, op


def test_a_replacement_that_keeps_every_override_is_known_one_that_drops_one_is_not() -> None:
    keeps = alter_configs_request(
        "orders", [("retention.ms", "1000"), ("segment.ms", "9")], principal=WHO, current=ORDERS
    )
    state = state_after(keeps, ())
    assert state is not None and state.overrides == {"retention.ms", "segment.ms"}
    drops = alter_configs_request("orders", [("segment.ms", "9")], principal=WHO, current=ORDERS)
    assert state_after(drops, ()) is None


def test_no_state_without_a_current_one_with_unknown_overrides_or_for_other_changes() -> None:
    ops = [("segment.ms", "SET", "1")]
    assert state_after(incremental_alter_configs_request("orders", ops, principal=WHO), ()) is None
    unknown = TopicState("orders", configs=ORDERS.configs, overrides=None)
    request = incremental_alter_configs_request("orders", ops, principal=WHO, current=unknown)
    assert state_after(request, ()) is None
    partitions = create_partitions_request("orders", 6, principal=WHO, current=ORDERS)
    assert state_after(partitions, ()) is None
    dry_run = incremental_alter_configs_request(
        "orders", ops, principal=WHO, current=ORDERS, validate_only=True
    )
    assert state_after(dry_run, ()) is None
