"""Cluster-wide config defaults (issue 11), attacked through the enforcing proxy: refused.

`kafka-configs --entity-type brokers --entity-default` (or one broker id, or the legacy
AlterConfigs) sets what every topic without its own value gets: a retention, cleanup policy or
min.insync.replicas the topic rules deny for each topic, set for all of them at once. Here
unlisted principals try it with the CLI (brokers, one broker, broker loggers, groups,
client-metrics), kafka-python's legacy AlterConfigs, confluent-kafka, raw frames (mixed with
topic resources and an unknown resource type) and fifty raced attempts; a granted principal
(`User:alice`, SCRAM through a SASL proxy) gets through only within its grant and only where
no topic that inherits the default would leave the topic rules, and a topic alter judged
right after a granted new default is judged on that default (not on one read from a broker
that has not applied it yet). Every outcome is read on the brokers directly (DescribeConfigs on
each broker's own port) after a fence, and whatever a test sets is restored there directly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    ResourceType,
)
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType

from harness.cited import reason
from harness.proxy_process import ProxyProcess
from tests.security.broker_configs_support import (
    ALICE,
    BOB,
    BROKER,
    BROKER_LOGGER,
    DAY_MS,
    INVALID_REQUEST,
    LOGGER,
    POLICY_VIOLATION,
    SET,
    TOPIC,
    client_metrics_configs,
    codes,
    concurrently,
    confluent,
    confluent_set,
    denied_message,
    drop_topics,
    dynamic_group_configs,
    incremental_request,
    kafka_configs,
    kafka_python,
    kp_send,
    legacy_request,
    make_topics,
    records,
    settled_configs,
    topic_config,
    uid,
)
from tests.security.kafka_tools import command_config
from tests.security.raw import client, wait_until

pytestmark = pytest.mark.integration


def test_entity_default_from_kafka_configs_is_refused_and_the_defaults_stay(
    kafka: Any, enforcing_proxy: ProxyProcess, restored: dict[str, Any]
) -> None:
    # The cluster already has min.insync.replicas=1 as its default (KRaft writes it at format
    # for eligible leader replicas): 2 is what a change would look like on the brokers.
    attacks = {
        "log.retention.ms": str(90 * DAY_MS),
        "min.insync.replicas": "2",
        "log.cleanup.policy": "compact",
    }
    seen = len(records(enforcing_proxy))
    results = concurrently(
        [
            lambda key=key, value=value: kafka_configs(
                kafka,
                enforcing_proxy.bootstrap,
                "--entity-type",
                "brokers",
                "--entity-default",
                "--add-config",
                f"{key}={value}",
            )
            for key, value in attacks.items()
        ]
    )
    for key, result in zip(attacks, results, strict=True):
        output = result.stdout + result.stderr
        assert result.returncode != 0, output
        assert reason(denied_message(output)) == (
            f"[broker-configs] User:ANONYMOUS may not change {key} on the cluster default: "
            "no broker_configs rule of the policy allows it"
        )
    # The proxy answered: the brokers never saw a change, read after a fence.
    assert settled_configs(kafka) == restored
    new = records(enforcing_proxy)[seen:]
    assert sorted(
        (e["resource_type"], e["resource"], e["decision"], e["request"]["changes"][0]["name"])
        for e in new
    ) == sorted(("cluster", "", "denied", key) for key in attacks)


def test_one_broker_its_loggers_groups_and_client_metrics_are_refused(
    kafka: Any, broker_configs_proxy: ProxyProcess, restored: dict[str, Any], tmp_path: Path
) -> None:
    bob = command_config(tmp_path / "bob.properties", *BOB)
    group, metrics = f"bcfg-g-{uid()}", f"bcfg-m-{uid()}"
    attacks = [
        (
            ("--entity-type", "brokers", "--entity-name", "1"),
            f"log.retention.ms={90 * DAY_MS}",
            "log.retention.ms on broker '1'",
        ),
        (
            ("--entity-type", "broker-loggers", "--entity-name", "2"),
            f"{LOGGER}=TRACE",
            f"{LOGGER} on broker logger '2'",
        ),
        (
            ("--entity-type", "groups", "--entity-name", group),
            "consumer.session.timeout.ms=60000",
            f"consumer.session.timeout.ms on group '{group}'",
        ),
        (
            ("--entity-type", "client-metrics", "--entity-name", metrics),
            "metrics=org.apache.kafka.,interval.ms=1000",
            f"interval.ms on client metrics '{metrics}'",
        ),
    ]
    seen = len(records(broker_configs_proxy))
    results = concurrently(
        [
            lambda entity=entity, change=change: kafka_configs(
                kafka, broker_configs_proxy.bootstrap, *entity, "--add-config", change, config=bob
            )
            for entity, change, _ in attacks
        ]
    )
    for (_, _, named), result in zip(attacks, results, strict=True):
        output = result.stdout + result.stderr
        assert result.returncode != 0, output
        assert f"[broker-configs] User:bob may not change {named}: no broker_configs rule" in (
            denied_message(output)
        )
    assert settled_configs(kafka) == restored
    assert dynamic_group_configs(kafka, group) == {}
    assert client_metrics_configs(kafka, metrics) == {}
    new = records(broker_configs_proxy)[seen:]
    assert sorted(
        (e["principal"], e["resource_type"], e["resource"], e["decision"]) for e in new
    ) == [
        ("User:bob", "broker", "1", "denied"),
        ("User:bob", "broker_logger", "2", "denied"),
        ("User:bob", "client_metrics", metrics, "denied"),
        ("User:bob", "group", group, "denied"),
    ]


def test_legacy_alter_configs_from_kafka_python_is_refused(
    kafka: Any,
    enforcing_proxy: ProxyProcess,
    broker_configs_proxy: ProxyProcess,
    restored: dict[str, Any],
) -> None:
    anonymous = kafka_python(enforcing_proxy.bootstrap)
    alice = kafka_python(broker_configs_proxy.bootstrap, ALICE)
    try:
        # The public API: AlterConfigs (key 33) to each broker id, with what it reads to keep.
        for node in sorted(kafka.broker_addresses):
            resource = KpConfigResource(
                ConfigResourceType.BROKER, str(node), configs={"log.retention.ms": str(90 * DAY_MS)}
            )
            answer = anonymous.alter_configs([resource], raise_on_unknown=False, incremental=False)
            assert answer["broker"][str(node)].startswith("[Error 44] PolicyViolationError:")
            assert (
                f"replaces every dynamic config of broker '{node}'" in answer["broker"][str(node)]
            )
        # The cluster default, as the request is built (the public API refuses the empty name).
        default = KpConfigResource(
            ConfigResourceType.BROKER, "", configs={"log.cleanup.policy": "compact"}
        )
        response = kp_send(anonymous, [default], incremental=False)
        ((error, message),) = [(r.error_code, r.error_message) for r in response.responses]
        assert error == POLICY_VIOLATION
        assert "User:ANONYMOUS may not change log.cleanup.policy on the cluster default" in message
        # A granted key within its bounds still needs '*' to replace the whole resource.
        within = KpConfigResource(
            ConfigResourceType.BROKER, "", configs={"log.retention.ms": str(14 * DAY_MS)}
        )
        response = kp_send(alice, [within], incremental=False)
        ((error, message),) = [(r.error_code, r.error_message) for r in response.responses]
        assert (error, reason(message)) == (
            POLICY_VIOLATION,
            "[broker-configs] the legacy AlterConfigs replaces every dynamic config of the "
            "cluster default; only a rule granting all keys ('*') to User:alice allows it "
            "(IncrementalAlterConfigs changes single keys)",
        )
    finally:
        anonymous.close()
        alice.close()
    assert settled_configs(kafka) == restored


def test_confluent_incremental_alter_configs_on_each_broker_is_refused(
    kafka: Any, broker_configs_proxy: ProxyProcess, restored: dict[str, Any]
) -> None:
    bob, alice = (
        confluent(broker_configs_proxy.bootstrap, BOB),
        confluent(broker_configs_proxy.bootstrap, ALICE),
    )
    for node in sorted(kafka.broker_addresses):
        error = confluent_set(bob, ResourceType.BROKER, str(node), "min.insync.replicas", "1")
        assert error is not None and error.code() == POLICY_VIOLATION, error
        assert f"User:bob may not change min.insync.replicas on broker '{node}'" in error.str()
        # Granted to alice, but not beyond the grant's bounds.
        error = confluent_set(
            alice, ResourceType.BROKER, str(node), "log.retention.ms", str(90 * DAY_MS)
        )
        assert error is not None and reason(error.str()) == (
            "[alice-defaults] log.retention.ms would be 7776000000 (90d); "
            "the limit is 2592000000 (30d)"
        )
    assert settled_configs(kafka) == restored


def test_raw_frames_judge_topic_and_broker_resources_of_one_request_apart(
    kafka: Any, enforcing_proxy: ProxyProcess, restored: dict[str, Any]
) -> None:
    allowed, denied, legacy = (f"bcfg.mixed-{uid()}-{i}" for i in range(3))
    make_topics(kafka, allowed, denied, legacy)
    wire = client(enforcing_proxy.bootstrap)
    try:
        forever = str(90 * DAY_MS)
        response = wire.request(
            incremental_request(
                (TOPIC, allowed, {"retention.ms": (SET, str(3 * 3_600_000))}),
                (BROKER, "", {"log.retention.ms": (SET, forever)}),
                (TOPIC, denied, {"retention.ms": (SET, forever)}),
                (BROKER, "1", {"min.insync.replicas": (SET, "1")}),
                (BROKER_LOGGER, "2", {LOGGER: (SET, "TRACE")}),
                (99, "x", {"anything": (SET, "1")}),
            )
        )
        assert codes(response) == [
            (TOPIC, allowed, 0),
            (BROKER, "", POLICY_VIOLATION),
            (TOPIC, denied, POLICY_VIOLATION),
            (BROKER, "1", POLICY_VIOLATION),
            (BROKER_LOGGER, "2", POLICY_VIOLATION),
            (99, "x", INVALID_REQUEST),
        ]
        # The legacy AlterConfigs, mixed the same way.
        response = wire.request(
            legacy_request(
                (BROKER, "", {"log.cleanup.policy": "compact"}),
                (TOPIC, legacy, {"retention.ms": str(2 * 3_600_000)}),
                (BROKER, "3", {"log.retention.ms": forever}),
            )
        )
        assert codes(response) == [
            (BROKER, "", POLICY_VIOLATION),
            (TOPIC, legacy, 0),
            (BROKER, "3", POLICY_VIOLATION),
        ]
    finally:
        wire.close()
    # The allowed topics reached the broker, nothing else did.
    assert wait_until(lambda: topic_config(kafka, allowed, "retention.ms") == str(3 * 3_600_000))
    assert wait_until(lambda: topic_config(kafka, legacy, "retention.ms") == str(2 * 3_600_000))
    assert settled_configs(kafka) == restored
    assert topic_config(kafka, denied, "retention.ms") == str(7 * DAY_MS)
    drop_topics(kafka, allowed, denied, legacy)


# --- a granted principal -------------------------------------------------------------------------
