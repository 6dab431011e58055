"""A broker policy jar in the proxy answers exactly as it does on the broker.

One cluster runs examples/java-policy's ReferencePolicy as its brokers'
create.topic.policy.class.name and alter.config.policy.class.name. The session cluster has no
broker policy, and the proxy in front of it loads the same jar as a java_policy rule. The same
corpus (single and batch creates, validate_only, explicit assignments, IncrementalAlterConfigs
and AlterConfigs, valid and invalid) goes to both through the Java AdminClient and
confluent-kafka: every topic's error and message, and the cluster each path leaves behind
(read from the brokers), must be identical. A third run goes through a proxy enforcing the
equivalent YAML policy (examples/java-policy/equivalent-policy.yaml): its verdicts agree.
"""

from __future__ import annotations

import shutil
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import REPO
from harness.cited import reason
from harness.java_policies import REFERENCE_CLASS, build_jar, kafka_clients_jar
from harness.local_kafka import LocalKafka
from harness.proxy_process import ProxyProcess
from tests.integration.admin_clients import (
    AdminHarness,
    BrokerView,
    ConfigOp,
    ConfluentAdmin,
    JavaAdmin,
    NewTopicSpec,
    TopicOutcome,
)
from tests.integration.test_admin_clients import until

pytestmark = pytest.mark.integration

POLICY_CLUSTER_PORT_BASE = 21092
JAVA_PROXY_PORTS = (21700, 21710)
YAML_PROXY_PORTS = (21720, 21730)
BROKER_SETTINGS = {"policy.max.partitions": "6"}
EQUIVALENT_YAML = REPO / "examples" / "java-policy" / "equivalent-policy.yaml"
WEEK_MS = "604800000"
CLIENTS = ("java", "confluent")


@pytest.fixture(scope="module")
def jar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_jar(tmp_path_factory.mktemp("jar") / "reference-policy.jar")


@pytest.fixture(scope="module")
def policy_cluster(jar: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A 3-broker cluster with the reference policy on its brokers (and controllers)."""
    cluster = LocalKafka(
        tmp_path_factory.mktemp("policy-cluster") / "cluster",
        brokers=3,
        port_base=POLICY_CLUSTER_PORT_BASE,
        light_jvm=True,
        broker_props={
            "create.topic.policy.class.name": REFERENCE_CLASS,
            "alter.config.policy.class.name": REFERENCE_CLASS,
            **BROKER_SETTINGS,
        },
        extra_jars=[jar],
    )
    cluster.up(timeout=180)
    try:
        yield cluster
    finally:
        cluster.down()


@pytest.fixture(scope="module")
def java_proxy(
    kafka: Any, jar: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProxyProcess]:
    """The proxy in front of the policy-free session cluster, loading the same jar."""
    workdir = tmp_path_factory.mktemp("java-proxy")
    shutil.copy(jar, workdir / jar.name)
    policy = workdir / "policy.yaml"
    rule = {
        "name": "broker-policy",
        "java_policy": {
            "jar": jar.name,  # beside the policy file
            "class": REFERENCE_CLASS,
            "classpath": [str(kafka_clients_jar())],
            "config": BROKER_SETTINGS,
        },
    }
    policy.write_text(yaml.safe_dump({"version": 1, "rules": [rule]}))
    process = ProxyProcess(
        workdir,
        kafka.bootstrap_servers,
        *JAVA_PROXY_PORTS,
        extra={"policy": {"file": str(policy)}, "audit": {"file": str(workdir / "audit.jsonl")}},
    )
    process.audit_path = workdir / "audit.jsonl"
    try:
        yield process
    finally:
        assert process.stop() == 0


@pytest.fixture(scope="module")
def yaml_proxy(kafka: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    """A proxy enforcing the YAML rewrite of the reference policy."""
    workdir = tmp_path_factory.mktemp("yaml-proxy")
    process = ProxyProcess(
        workdir,
        kafka.bootstrap_servers,
        *YAML_PROXY_PORTS,
        extra={"policy": {"file": str(EQUIVALENT_YAML)}},
    )
    try:
        yield process
    finally:
        assert process.stop() == 0


@dataclass(frozen=True)
class Step:
    """One admin call of the corpus, run against topics named with a prefix."""

    label: str
    run: Callable[[AdminHarness, str], list[TopicOutcome]]
    clients: tuple[str, ...] = CLIENTS


def _create(
    *specs: Callable[[str], NewTopicSpec], validate_only: bool = False
) -> Callable[[AdminHarness, str], list[TopicOutcome]]:
    return lambda admin, p: admin.create_topics([spec(p) for spec in specs], validate_only)


def _topic(
    suffix: str,
    partitions: int | None = 3,
    rf: int | None = 2,
    retention: str | None = "3600000",
    **kwargs: Any,
) -> Callable[[str], NewTopicSpec]:
    configs = {} if retention is None else {"retention.ms": retention}
    configs.update(kwargs.pop("configs", {}))
    return lambda p: NewTopicSpec(f"{p}.{suffix}", partitions, rf, configs=configs, **kwargs)


def _incremental(topic: str, *ops: ConfigOp) -> Callable[[AdminHarness, str], list[TopicOutcome]]:
    return lambda admin, p: admin.incremental_alter_configs({f"{p}.{topic}": list(ops)})


def _replace(
    topic: str, configs: dict[str, str]
) -> Callable[[AdminHarness, str], list[TopicOutcome]]:
    return lambda admin, p: admin.alter_configs({f"{p}.{topic}": configs})


CORPUS = (
    Step("one valid create", _create(_topic("orders"))),
    Step(
        "a batch, one topic per rule",
        _create(
            _topic("payments"),
            _topic("wide", partitions=8),
            _topic("Upper"),
            _topic("single", rf=1),
            _topic("forever", retention=None),
            _topic("long", retention="999999999999"),
            _topic("defaults", partitions=None, rf=None),
            _topic("compact", configs={"cleanup.policy": "compact"}),
        ),
    ),
    Step(
        "validate_only",
        _create(_topic("checked"), _topic("checked-wide", partitions=7), validate_only=True),
    ),
    Step(
        "explicit assignments",
        _create(
            _topic("placed", partitions=None, rf=None, assignment=[[1, 2], [2, 3]]),
            _topic("placed-thin", partitions=None, rf=None, assignment=[[1], [2]]),
            _topic("placed-wide", partitions=None, rf=None, assignment=[[1, 2]] * 7),
        ),
    ),
    Step("the topic exists", _create(_topic("orders"))),
    Step("more replicas than brokers", _create(_topic("rf4", rf=4))),
    Step("a retention change", _incremental("orders", ConfigOp("retention.ms", "SET", "7200000"))),
    Step(
        "retention beyond the bound",
        _incremental("orders", ConfigOp("retention.ms", "SET", "999999999999")),
    ),
    Step("retention removed", _incremental("orders", ConfigOp("retention.ms", "DELETE"))),
    Step("compact only", _incremental("orders", ConfigOp("cleanup.policy", "SET", "compact"))),
    Step(
        "compact and delete",
        _incremental("orders", ConfigOp("cleanup.policy", "SET", "compact,delete")),
    ),
    Step(
        "set to the current value",
        _incremental("orders", ConfigOp("retention.ms", "SET", "7200000")),
    ),
    Step("an unrelated key", _incremental("payments", ConfigOp("segment.ms", "SET", "3600000"))),
    Step(
        "AlterConfigs, allowed",
        _replace("payments", {"retention.ms": "5000", "cleanup.policy": "delete"}),
        ("confluent",),
    ),
    Step(
        "AlterConfigs, compact only",
        _replace("payments", {"retention.ms": "5000", "cleanup.policy": "compact"}),
        ("confluent",),
    ),
    Step(
        "AlterConfigs, retention dropped",
        _replace("payments", {"segment.ms": "3600000"}),
        ("confluent",),
    ),
)


def run_corpus(
    bootstrap: str, classpath: str, prefixes: dict[str, str]
) -> dict[tuple[str, str], list[tuple[str, bool, str | None, str | None]]]:
    """Every step with each client (each with its own topic prefix); prefixes read as `P`."""
    results = {}
    admins: dict[str, AdminHarness] = {
        "java": JavaAdmin(bootstrap, classpath),
        "confluent": ConfluentAdmin(bootstrap),
    }
    try:
        for client, admin in admins.items():
            prefix = prefixes[client]
            for step in CORPUS:
                if client not in step.clients:
                    continue
                outcomes = step.run(admin, prefix)
                results[client, step.label] = [
                    (
                        o.topic.replace(prefix, "P"),
                        o.ok,
                        o.error,
                        None if o.message is None else o.message.replace(prefix, "P"),
                    )
                    for o in outcomes
                ]
    finally:
        for admin in admins.values():
            admin.close()
    return results


def cluster_state(bootstrap: str, prefixes: dict[str, str]) -> dict[str, Any]:
    """The corpus topics as the brokers report them, once two reads a second apart agree (a
    broker applies a committed change a moment later)."""
    state = _read_state(bootstrap, prefixes)
    for _ in range(20):
        time.sleep(1)
        again = _read_state(bootstrap, prefixes)
        if again == state:
            break
        state = again
    return state


def _read_state(bootstrap: str, prefixes: dict[str, str]) -> dict[str, Any]:
    """The corpus topics: partitions, replication factor and the configs set on them."""
    view = BrokerView(bootstrap)
    state = {}
    for prefix in prefixes.values():
        for name in sorted(t for t in view.topics() if t.startswith(prefix + ".")):
            info = view.describe(name)
            assert info is not None
            own = {
                k: v.value for k, v in info.configs.items() if v.source == "DYNAMIC_TOPIC_CONFIG"
            }
            state[name.replace(prefix, "P")] = (len(info.partitions), info.replication_factor, own)
    return state


def prefixes(run: str) -> dict[str, str]:
    return {client: f"eq{run}{client.replace('-', '')}" for client in CLIENTS}


@pytest.fixture(scope="module")
def broker_run(policy_cluster: Any) -> tuple[dict[Any, Any], dict[str, Any]]:
    names = prefixes(uuid.uuid4().hex[:6])
    results = run_corpus(policy_cluster.bootstrap_servers, policy_cluster.classpath(), names)
    return results, cluster_state(policy_cluster.bootstrap_servers, names)


@pytest.fixture(scope="module")
def java_proxy_run(kafka: Any, java_proxy: ProxyProcess) -> tuple[dict[Any, Any], dict[str, Any]]:
    names = prefixes(uuid.uuid4().hex[:6])
    results = run_corpus(java_proxy.bootstrap, kafka.classpath(), names)
    return results, cluster_state(kafka.bootstrap_servers, names)


def test_the_broker_policy_is_exercised_by_the_corpus(
    broker_run: tuple[dict[Any, Any], dict[str, Any]],
) -> None:
    results, state = broker_run
    errors = {(o[2], o[3]) for outcomes in results.values() for o in outcomes if not o[1]}
    denied = {message for error, message in errors if error == "POLICY_VIOLATION"}
    # Every check of the reference policy fired at least once on the broker.
    for fragment in (
        "must look like team.dataset",
        "partitions; at most 6",
        "at least 2 is required",
        "must set retention.ms",
        "it must be between 0 and 604800000",
        "may not be removed",
        "may not become compact-only",
    ):
        assert any(fragment in m for m in denied), fragment
    assert ("TOPIC_ALREADY_EXISTS", "Topic 'P.orders' already exists.") in errors
    assert any(error == "INVALID_REPLICATION_FACTOR" for error, _ in errors)
    assert "P.orders" in state and "P.checked" not in state


def test_clients_see_what_the_broker_policy_would_have_sent(
    broker_run: tuple[dict[Any, Any], dict[str, Any]],
    java_proxy_run: tuple[dict[Any, Any], dict[str, Any]],
) -> None:
    broker_results, _ = broker_run
    proxy_results, _ = java_proxy_run
    assert proxy_results.keys() == broker_results.keys()
    for key, expected in broker_results.items():
        # The same words; the proxy's denial then names its decision, which the broker has not.
        assert _uncited(proxy_results[key]) == expected, key


Outcome = tuple[str, bool, str | None, str | None]


def _uncited(outcomes: list[Outcome]) -> list[Outcome]:
    """The outcomes with each policy denial's message read without its decision id."""
    return [
        (topic, ok, error, reason(message) if error == "POLICY_VIOLATION" else message)
        for topic, ok, error, message in outcomes
    ]


def test_the_cluster_ends_in_the_same_state(
    broker_run: tuple[dict[Any, Any], dict[str, Any]],
    java_proxy_run: tuple[dict[Any, Any], dict[str, Any]],
) -> None:
    _, broker_state = broker_run
    _, proxy_state = java_proxy_run
    assert proxy_state == broker_state
    assert proxy_state["P.orders"] == (
        3,
        2,
        {"retention.ms": "7200000", "cleanup.policy": "compact,delete"},
    )


def test_the_proxy_audits_java_decisions_like_any_rule(
    java_proxy: ProxyProcess, java_proxy_run: Any
) -> None:
    denied = [e for e in java_proxy.audit_events() if e["decision"] == "denied"]
    assert {v["rule"] for e in denied for v in e["violations"]} == {"broker-policy"}
    upper = [e for e in denied if e["topic"].endswith(".Upper")]
    assert upper and all(
        e["violations"][0]["message"]
        == f"Topic name {e['topic']} must look like team.dataset (lower case)."
        for e in upper
    )


def test_the_equivalent_yaml_policy_agrees_on_every_verdict(
    kafka: Any, yaml_proxy: ProxyProcess, broker_run: tuple[dict[Any, Any], dict[str, Any]]
) -> None:
    names = prefixes(uuid.uuid4().hex[:6])
    yaml_results = run_corpus(yaml_proxy.bootstrap, kafka.classpath(), names)

    def verdicts(results: dict[Any, Any]) -> dict[Any, list[tuple[str, str]]]:
        return {
            key: [
                (topic, "denied" if error == "POLICY_VIOLATION" else "ok" if ok else error)
                for topic, ok, error, _ in outcomes
            ]
            for key, outcomes in results.items()
        }

    expected = verdicts(broker_run[0])
    # The one deliberate difference (see the YAML file): the broker never shows its policy
    # AlterConfigs' implicit removal of retention.ms, and the YAML rule denies it.
    dropped = ("confluent", "AlterConfigs, retention dropped")
    assert expected[dropped] == [("P.payments", "ok")]
    expected[dropped] = [("P.payments", "denied")]
    assert verdicts(yaml_results) == expected
    yaml_state = cluster_state(kafka.bootstrap_servers, names)
    broker_state = dict(broker_run[1])
    broker_state["P.payments"] = (3, 2, {"retention.ms": "5000", "cleanup.policy": "delete"})
    assert yaml_state == broker_state


def test_sighup_reloads_the_jar_settings_and_a_broken_reload_keeps_the_old_policy(
    java_proxy: ProxyProcess, java_proxy_run: Any
) -> None:
    # Runs last in this module: it changes the proxy's policy.
    policy = java_proxy.config_path.parent / "policy.yaml"
    document = yaml.safe_load(policy.read_text())
    admin = ConfluentAdmin(java_proxy.bootstrap)
    prefix = f"eq{uuid.uuid4().hex[:6]}"
    name = f"{prefix}.reloaded"

    def verdict() -> list[TopicOutcome]:
        return admin.create_topics([_topic("reloaded")(prefix)], validate_only=True)

    try:
        assert verdict()[0].ok
        document["rules"][0]["java_policy"]["config"]["policy.max.partitions"] = "2"
        policy.write_text(yaml.safe_dump(document))
        java_proxy.process.send_signal(signal.SIGHUP)
        denied = until(lambda: None if (o := verdict()[0]).ok else o)
        assert (
            reason(denied.message) == f"Topic {name} asks for 3 partitions; at most 2 are allowed."
        )
        document["rules"][0]["java_policy"]["class"] = "com.example.policy.Missing"
        policy.write_text(yaml.safe_dump(document))
        java_proxy.process.send_signal(signal.SIGHUP)
        until(lambda: "rules[0].java_policy.class" in java_proxy.log_text() or None)
        assert reason(verdict()[0].message) == reason(denied.message)
    finally:
        admin.close()
