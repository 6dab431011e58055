"""Cluster-wide config defaults (issue 11) through the enforcing proxy: a granted principal gets
through only within its grant and the topic rules, fifty raced attempts never reach the
brokers, each resource is one audit record, and a topic alter right after a new default is
judged on that default. See test_broker_configs_refused.py for the attacks refused.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
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
    CLIENT_METRICS,
    COHERENCE_ROUNDS,
    DAY_MS,
    GROUP,
    INVALID_REQUEST,
    LOGGER,
    POLICY_VIOLATION,
    SET,
    TOPIC,
    alter_directly,
    broker_configs,
    client_metrics_configs,
    codes,
    confluent,
    confluent_set,
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


def test_a_granted_change_reaches_the_brokers_only_within_the_grant_and_the_topic_rules(
    kafka: Any, broker_configs_proxy: ProxyProcess, restored: dict[str, Any], tmp_path: Path
) -> None:
    tag = uid()
    own, inherits = f"bcfg-short.{tag}-own", f"bcfg-short.{tag}-inherits"
    make_topics(kafka, own, configs={"retention.ms": str(DAY_MS)})
    make_topics(kafka, inherits)
    three_days, four_days = str(3 * DAY_MS), str(4 * DAY_MS)
    alice = kafka_python(broker_configs_proxy.bootstrap, ALICE)
    seen = len(records(broker_configs_proxy))

    def alter(name: str, **ops: tuple[str, str | None]) -> tuple[int, str | None]:
        resource = KpConfigResource(ConfigResourceType.BROKER, name, configs=ops)
        (result,) = kp_send(alice, [resource], incremental=True).responses
        message = result.error_message
        # A denial ends with its decision's id; the reason is what these checks read.
        denied = result.error_code == POLICY_VIOLATION
        return result.error_code, reason(message) if denied else message

    try:
        # The topic that inherits the default would keep 3 days: beyond short-retention's 2.
        for name, label in (("", "the cluster default"), ("2", "broker '2'")):
            assert alter(name, **{"log.retention.ms": ("SET", three_days)}) == (
                POLICY_VIOLATION,
                f"[inherited-defaults] the new default log.retention.ms={three_days} on {label} "
                f"would put 1 topic that inherit it outside the topic rules: {inherits} "
                f"([short-retention] topic '{inherits}' resets retention.ms to its default "
                f"{three_days} (3d); the limit is 172800000 (2d))",
            )
        # Beyond the grant's bounds, a key not granted, removing a bounded default.
        error, message = alter("", **{"log.retention.ms": ("SET", str(31 * DAY_MS))})
        assert error == POLICY_VIOLATION
        assert message == (
            "[alice-defaults] log.retention.ms would be 2678400000 (31d); "
            "the limit is 2592000000 (30d)"
        )
        error, message = alter(
            "",
            **{"log.retention.ms": ("SET", str(DAY_MS)), "min.insync.replicas": ("SET", "1")},
        )
        assert error == POLICY_VIOLATION
        assert "User:alice may not change min.insync.replicas on the cluster default" in message
        assert alter("", **{"log.retention.ms": ("DELETE", None)}) == (
            POLICY_VIOLATION,
            "[alice-defaults] log.retention.ms is bounded, and removing it falls back to a value "
            "the proxy cannot check; set it within the bounds instead",
        )
        # Granted without bounds, but the topic rules bound what it is the default of.
        assert alter("", **{"log.cleanup.policy": ("DELETE", None)}) == (
            POLICY_VIOLATION,
            "[inherited-defaults] removing the cleanup.policy default on the cluster default "
            "falls back to a value the proxy cannot check against the topic rules that bound "
            "cleanup.policy; set it to a value instead",
        )
        assert settled_configs(kafka) == restored

        # Once the inheriting topic is gone (deleted through the proxy, which forgets it), the
        # topic with its own retention.ms does not block: the change reaches every broker.
        bob = confluent(broker_configs_proxy.bootstrap, BOB)
        bob.delete_topics([inherits])[inherits].result(30)
        granted = kafka_configs(
            kafka,
            broker_configs_proxy.bootstrap,
            "--entity-type",
            "brokers",
            "--entity-default",
            "--add-config",
            f"log.retention.ms={three_days}",
            config=command_config(tmp_path / "alice.properties", *ALICE),
        )
        assert granted.returncode == 0, granted.stdout + granted.stderr
        assert alter("2", **{"log.retention.ms": ("SET", four_days)}) == (0, None)

        def applied() -> bool:
            state = broker_configs(kafka)
            return state["broker 2"].get("log.retention.ms") == four_days and all(
                state[f"default@{n}"].get("log.retention.ms") == three_days
                for n in kafka.broker_addresses
            )

        assert wait_until(applied)
        assert topic_config(kafka, own, "retention.ms") == str(DAY_MS)
    finally:
        alice.close()
        drop_topics(kafka, own, inherits)
    new = records(broker_configs_proxy)[seen:]
    assert [(e["resource_type"], e["resource"], e["decision"]) for e in new] == [
        ("cluster", "", "denied"),
        ("broker", "2", "denied"),
        ("cluster", "", "denied"),
        ("cluster", "", "denied"),
        ("cluster", "", "denied"),
        ("cluster", "", "denied"),
        ("cluster", "", "allowed"),
        ("broker", "2", "allowed"),
    ]
    assert {e["principal"] for e in new} == {"User:alice"}
    assert new[0]["request"]["outside"] == [inherits]


def test_a_new_default_names_the_first_three_topics_it_would_put_outside_the_rules(
    kafka: Any, broker_configs_proxy: ProxyProcess, restored: dict[str, Any]
) -> None:
    # cleanup-immutable: no topic's cleanup.policy may change, inherited or not.
    topics = [f"bcfg.inherit-{uid()}-{i}" for i in range(4)]
    make_topics(kafka, *topics)
    alice = kafka_python(broker_configs_proxy.bootstrap, ALICE)
    try:
        resource = KpConfigResource(
            ConfigResourceType.BROKER, "", configs={"log.cleanup.policy": ("SET", "compact")}
        )
        (result,) = kp_send(alice, [resource], incremental=True).responses
    finally:
        alice.close()
    assert result.error_code == POLICY_VIOLATION
    match = re.fullmatch(
        r"\[inherited-defaults\] the new default log\.cleanup\.policy=compact on the cluster "
        r"default would put (\d+) topics that inherit it outside the topic rules: "
        r"(.*); and (\d+) more",
        reason(result.error_message),
    )
    assert match is not None, result.error_message
    total, named, more = int(match.group(1)), match.group(2), int(match.group(3))
    # Every topic in the cluster that inherits the policy counts, these four among them.
    assert total >= len(topics) and more == total - 3
    assert named.count("[cleanup-immutable]") == 3
    assert "changes cleanup.policy from 'delete' to 'compact'" in named
    assert set(topics) <= set(records(broker_configs_proxy)[-1]["request"]["outside"])
    assert settled_configs(kafka) == restored
    drop_topics(kafka, *topics)


# --- repeated and raced --------------------------------------------------------------------------


def test_fifty_raced_attempts_through_several_clients_never_reach_the_brokers(
    kafka: Any,
    enforcing_proxy: ProxyProcess,
    broker_configs_proxy: ProxyProcess,
    restored: dict[str, Any],
) -> None:
    forever = str(90 * DAY_MS)
    nodes = sorted(kafka.broker_addresses)
    outcomes: list[int] = []
    failures: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(6)

    def collect(results: list[int]) -> None:
        with lock:
            outcomes.extend(results)

    def raw_pipelined() -> None:
        # Anonymous, sixteen requests pipelined on one connection: both APIs, every broker.
        wire = client(enforcing_proxy.bootstrap)
        try:
            start.wait(30)
            sent = []
            for i in range(8):
                name = "" if i % 4 == 0 else str(nodes[i % 3])
                sent.append(
                    wire.send(
                        incremental_request((BROKER, name, {"log.retention.ms": (SET, forever)}))
                    )
                )
                sent.append(
                    wire.send(legacy_request((BROKER, name, {"log.cleanup.policy": "compact"})))
                )
            results = []
            for expected in sent:
                got, answer = wire.receive()
                assert got == expected
                results.extend(code for *_, code in codes(answer))
            collect(results)
        finally:
            wire.close()

    def confluent_bob() -> None:
        bob = confluent(broker_configs_proxy.bootstrap, BOB)
        start.wait(30)
        results = []
        for i in range(6):
            error = confluent_set(
                bob, ResourceType.BROKER, str(nodes[i % 3]), "log.retention.ms", forever
            )
            results.append(0 if error is None else error.code())
        collect(results)

    def kafka_python_as(user: tuple[str, str], key: str, value: str, incremental: bool) -> None:
        admin = kafka_python(broker_configs_proxy.bootstrap, user)
        try:
            start.wait(30)
            results = []
            for i in range(5):
                op = ("SET", value) if incremental else value
                resource = KpConfigResource(
                    ConfigResourceType.BROKER, "" if i % 2 else str(nodes[i % 3]), configs={key: op}
                )
                results.extend(
                    r.error_code for r in kp_send(admin, [resource], incremental).responses
                )
            collect(results)
        finally:
            admin.close()

    def guarded(target: Callable[..., None], *args: Any) -> threading.Thread:
        def run() -> None:
            try:
                target(*args)
            except BaseException as exc:
                failures.append(exc)
                start.abort()

        return threading.Thread(target=run)

    before_anonymous, before_sasl = (
        len(records(enforcing_proxy)),
        len(records(broker_configs_proxy)),
    )
    threads = [
        guarded(raw_pipelined),
        guarded(raw_pipelined),
        guarded(confluent_bob),
        # 2, not 1: the cluster default already holds 1, so 1 would change nothing readable.
        guarded(kafka_python_as, BOB, "min.insync.replicas", "2", False),
        # alice's grant covers these keys: denied by the topics that inherit them, and bounds.
        guarded(kafka_python_as, ALICE, "log.cleanup.policy", "compact", True),
        guarded(kafka_python_as, ALICE, "log.retention.ms", forever, True),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not failures, failures
    attempts = 2 * 16 + 6 + 3 * 5
    assert outcomes == [POLICY_VIOLATION] * attempts
    assert settled_configs(kafka) == restored
    new = records(enforcing_proxy)[before_anonymous:] + records(broker_configs_proxy)[before_sasl:]
    assert len(new) == attempts
    assert {e["decision"] for e in new} == {"denied"}


# --- the audit record ----------------------------------------------------------------------------


def test_each_resource_is_one_audit_record(
    kafka: Any, enforcing_proxy: ProxyProcess, restored: dict[str, Any]
) -> None:
    group, metrics = f"bcfg-g-{uid()}", f"bcfg-m-{uid()}"
    wire = client(enforcing_proxy.bootstrap)
    try:
        host, port = wire.sock.getsockname()[:2]
        response = wire.request(
            incremental_request(
                (BROKER, "", {"log.retention.ms": (SET, str(90 * DAY_MS))}),
                (BROKER, "3", {"min.insync.replicas": (SET, "1")}),
                (BROKER_LOGGER, "1", {LOGGER: (SET, "TRACE")}),
                (GROUP, group, {"consumer.session.timeout.ms": (SET, "60000")}),
                (CLIENT_METRICS, metrics, {"interval.ms": (SET, "1000"), "metrics": (SET, "*")}),
                (1, "not-a-type", {"x": (SET, "1")}),
            )
        )
    finally:
        wire.close()
    assert [c for *_, c in codes(response)] == [POLICY_VIOLATION] * 5 + [INVALID_REQUEST]
    mine = [e for e in records(enforcing_proxy) if e["client"] == f"{host}:{port}"]
    assert [
        (e["api"], e["resource_type"], e["resource"], e["decision"], e["principal"], e["topic"])
        for e in mine
    ] == [
        ("IncrementalAlterConfigs", "cluster", "", "denied", "User:ANONYMOUS", None),
        ("IncrementalAlterConfigs", "broker", "3", "denied", "User:ANONYMOUS", None),
        ("IncrementalAlterConfigs", "broker_logger", "1", "denied", "User:ANONYMOUS", None),
        ("IncrementalAlterConfigs", "group", group, "denied", "User:ANONYMOUS", None),
        ("IncrementalAlterConfigs", "client_metrics", metrics, "denied", "User:ANONYMOUS", None),
    ]
    assert [v["rule"] for v in mine[4]["violations"]] == ["broker-configs", "broker-configs"]
    assert mine[0]["request"]["changes"] == [
        {"name": "log.retention.ms", "op": "SET", "value": str(90 * DAY_MS)}
    ]
    assert settled_configs(kafka) == restored
    assert dynamic_group_configs(kafka, group) == {}
    assert client_metrics_configs(kafka, metrics) == {}


# --- cache coherence -----------------------------------------------------------------------------


def test_a_topic_alter_right_after_a_new_default_is_judged_on_the_new_default(
    kafka: Any, broker_configs_proxy: ProxyProcess, restored: dict[str, Any]
) -> None:
    """Removing a topic's own retention.ms falls back to the cluster default: judged right after
    an allowed new default, it must be judged on that default, not on one cached or read from a
    broker that has not applied it yet (before the fix, the proxy's re-read could reach a broker
    a moment behind the controller and cache the old default: the removal got through about one
    round in eight, leaving the topic 3 days against short-retention's 2)."""
    topic = f"bcfg-short.{uid()}-coherent"
    one_day, three_days = str(DAY_MS), str(3 * DAY_MS)
    make_topics(kafka, topic, configs={"retention.ms": one_day})
    alice = kafka_python(broker_configs_proxy.bootstrap, ALICE)

    def alter(resource_type: ConfigResourceType, name: str, op: tuple[str, str | None]) -> Any:
        key = "retention.ms" if resource_type is ConfigResourceType.TOPIC else "log.retention.ms"
        resource = KpConfigResource(resource_type, name, configs={key: op})
        (result,) = kp_send(alice, [resource], incremental=True).responses
        return result

    try:
        for round_ in range(COHERENCE_ROUNDS):
            # The old default (1 day) is within short-retention; the topic has its own value.
            alter_directly(kafka, BROKER, "", {"log.retention.ms": one_day})
            alter_directly(kafka, TOPIC, topic, {"retention.ms": one_day})
            granted = alter(ConfigResourceType.BROKER, "", ("SET", three_days))
            assert (granted.error_code, granted.error_message) == (0, None), round_
            # At once: without its own value the topic would keep the new default, 3 days.
            probe = alter(ConfigResourceType.TOPIC, topic, ("DELETE", None))
            assert (probe.error_code, reason(probe.error_message)) == (
                POLICY_VIOLATION,
                f"[short-retention] topic '{topic}' sets retention.ms to {three_days} (3d); "
                "the limit is 172800000 (2d)",
            ), f"round {round_}"
        assert topic_config(kafka, topic, "retention.ms") == one_day
    finally:
        alice.close()
        drop_topics(kafka, topic)
