"""The Kafka Streams internal-topic rule kind (KIP-698)."""

from __future__ import annotations

from kafka_policy_proxy.policy import builders
from kafka_policy_proxy.policy.model import Principal

from .helpers import ALICE, cluster, compile_rules, topic
from .test_engine import decide, messages

OWNER = Principal("User:streams-pay")
POLICY = compile_rules(
    {
        "name": "streams",
        "streams": {
            "application_ids": ["pay-*", "fraud"],
            "owners": {"pay-*": ["User:streams-pay"]},
        },
    }
)
CHANGELOG = "pay-app-balances-changelog"
REPARTITION = "pay-app-KSTREAM-REPARTITION-0000000003-repartition"
STATE = cluster(
    topic(CHANGELOG, cleanup_policy="compact"),
    topic(REPARTITION, retention_ms="-1"),
    topic("fraud-scores-changelog", cleanup_policy="compact"),
    topic("fraud-KSTREAM-REPARTITION-1-repartition", retention_ms="-1"),
    topic("other-app-store-changelog", cleanup_policy="compact"),
)


def test_deleting_an_internal_topic_is_denied_except_for_owners() -> None:
    delete = builders.delete_topic_request(CHANGELOG, principal=ALICE)
    assert messages(decide(POLICY, delete, STATE)) == [
        f"[streams] topic '{CHANGELOG}' is a changelog topic of Kafka Streams application "
        "'pay-app'; deleting it loses the application's data"
    ]
    by_owner = builders.delete_topic_request(CHANGELOG, principal=OWNER)
    assert decide(POLICY, by_owner, STATE).allowed
    unowned = builders.delete_topic_request("fraud-scores-changelog", principal=OWNER)
    assert not decide(POLICY, unowned, STATE).allowed


def test_applications_not_listed_are_not_covered() -> None:
    delete = builders.delete_topic_request("other-app-store-changelog", principal=ALICE)
    assert decide(POLICY, delete, STATE).allowed


def test_delete_records_on_repartition_topics_is_how_streams_purges() -> None:
    # Owned application: only owners purge; unowned application: anyone (Streams itself).
    owned = builders.delete_records_request(REPARTITION, [(0, 100)], principal=OWNER)
    assert decide(POLICY, owned, STATE).allowed
    stranger = builders.delete_records_request(REPARTITION, [(0, 100)], principal=ALICE)
    assert not decide(POLICY, stranger, STATE).allowed
    unowned = builders.delete_records_request(
        "fraud-KSTREAM-REPARTITION-1-repartition", [(0, 1)], principal=ALICE
    )
    assert decide(POLICY, unowned, STATE).allowed
    changelog = builders.delete_records_request("fraud-scores-changelog", [(0, 1)], principal=ALICE)
    assert not decide(POLICY, changelog, STATE).allowed


def test_changelog_must_stay_compacted() -> None:
    drop = builders.incremental_alter_configs_request(
        CHANGELOG, [("cleanup.policy", "SET", "delete")], principal=OWNER
    )
    assert "would delete state (needs compact)" in messages(decide(POLICY, drop, STATE))[0]


def test_retention_on_a_non_windowed_changelog_is_denied_but_windowed_creation_is_not() -> None:
    add_delete = builders.incremental_alter_configs_request(
        CHANGELOG, [("cleanup.policy", "APPEND", "delete")], principal=OWNER
    )
    assert "non-windowed changelog" in messages(decide(POLICY, add_delete, STATE))[0]
    windowed = builders.create_request(
        "pay-app-window-store-changelog",
        6,
        3,
        None,
        [("cleanup.policy", "compact,delete"), ("retention.ms", "86400000")],
        principal=OWNER,
    )
    assert decide(POLICY, windowed, STATE).allowed
    sized = builders.create_request(
        "pay-app-window-store-changelog",
        6,
        3,
        None,
        [("cleanup.policy", "compact,delete"), ("retention.bytes", "1000")],
        principal=OWNER,
    )
    assert "would delete state by size" in messages(decide(POLICY, sized, STATE))[0]


def test_repartition_topics_keep_everything_until_streams_purges() -> None:
    finite = builders.incremental_alter_configs_request(
        REPARTITION, [("retention.ms", "SET", "3600000")], principal=OWNER
    )
    assert "could delete records not yet processed" in messages(decide(POLICY, finite, STATE))[0]
    compacted = builders.incremental_alter_configs_request(
        REPARTITION, [("cleanup.policy", "SET", "compact")], principal=OWNER
    )
    assert "compacting it drops records" in messages(decide(POLICY, compacted, STATE))[0]
    created = builders.create_request(
        "pay-app-x-repartition",
        6,
        3,
        None,
        [("cleanup.policy", "delete"), ("retention.ms", "-1")],
        principal=OWNER,
    )
    assert decide(POLICY, created, STATE).allowed


def test_adding_partitions_to_internal_topics_is_denied() -> None:
    grow = builders.create_partitions_request(CHANGELOG, 24, principal=OWNER)
    assert "breaks its key-to-partition mapping" in messages(decide(POLICY, grow, STATE))[0]


def test_streams_rule_can_be_scoped_by_principal() -> None:
    scoped = compile_rules(
        {"name": "streams", "match": {"except_principals": ["User:ops"]}, "streams": {}}
    )
    delete = builders.delete_topic_request("any-app-store-changelog", principal=ALICE)
    assert not decide(scoped, delete, STATE).allowed
    ops = builders.delete_topic_request("any-app-store-changelog", principal=Principal("User:ops"))
    assert decide(scoped, ops, STATE).allowed
