"""Cluster-wide config defaults (issue 11), attacked through the enforcing proxy.

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

import contextlib
import importlib
import re
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType

from codec.registry import request_class
from tests.integration.cluster_fixtures import TEST_POLICY
from tests.integration.support import ProxyProcess, sasl_enforcing_proxy
from tests.messages import build
from tests.security.raw import client, fence, wait_until
from tests.security.test_admin_apis import command_config, tool
from tests.wire import WireClient

pytestmark = pytest.mark.integration

SASL_BOOTSTRAP_PORT = 30800
SASL_NODE_PORT_BASE = 30810  # node N on 30810 + N
DAY_MS = 86_400_000
POLICY_VIOLATION = 44
INVALID_REQUEST = 42
# Kafka's ConfigResource types and DescribeConfigs config sources.
TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
DYNAMIC_BROKER_CONFIG, CLIENT_METRICS_CONFIG, GROUP_CONFIG = 2, 7, 8
SET, DELETE = 0, 1
# A logger an attacker would turn up to TRACE: it logs every request, with its contents.
LOGGER = "kafka.request.logger"
ALICE = ("alice", "alice-secret")  # granted by the module's policy
BOB = ("bob", "bob-secret")  # authenticated, granted nothing
# Rounds of "change the default, then alter a topic at once" (the stale-cache check).
COHERENCE_ROUNDS = 25

T = TypeVar("T")


def uid() -> str:
    return uuid.uuid4().hex[:8]


# --- the policy and the SASL proxy -------------------------------------------------------------


@pytest.fixture(scope="module")
def sasl_proxy(kafka: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    """An enforcing proxy in front of the brokers' SCRAM listener, with the module's policy:
    the test policy plus `short-retention` (bcfg-short.* keep at most 2 days) and a grant of
    three topic-config defaults to alice, on the cluster default and on one broker."""
    workdir = tmp_path_factory.mktemp("sasl-broker-configs")
    policy = yaml.safe_load(TEST_POLICY.read_text())
    policy["rules"].append(
        {
            "name": "short-retention",
            "match": {"topic_prefix": "bcfg-short."},
            "configs": {"retention.ms": {"max": "2d"}},
        }
    )
    policy["broker_configs"] = [
        {
            "name": "alice-defaults",
            "principals": ["User:alice"],
            "resources": ["cluster_default", "broker"],
            "keys": ["log.retention.ms", "log.cleanup.policy", "log.cleaner.delete.retention.ms"],
            "configs": {"log.retention.ms": {"min": "1h", "max": "30d"}},
        }
    ]
    path = workdir / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    process = sasl_enforcing_proxy(workdir, kafka, path, (SASL_BOOTSTRAP_PORT, SASL_NODE_PORT_BASE))
    yield process
    assert process.stop() == 0


# --- reading and restoring the brokers' configs, directly --------------------------------------


def describe(port: int, resources: Sequence[tuple[int, str]]) -> list[Any]:
    """DescribeConfigs v4 on one broker's own port; the results in request order."""
    m = importlib.import_module(request_class(32, 4).__module__)
    request = build(
        m.DescribeConfigsRequest,
        resources=tuple(
            build(
                m.DescribeConfigsResource, resource_type=t, resource_name=n, configuration_keys=None
            )
            for t, n in resources
        ),
        include_synonyms=False,
        include_documentation=False,
    )
    wire = WireClient("127.0.0.1", port)
    try:
        results = list(wire.request(request).results)
    finally:
        wire.close()
    for result in results:
        assert int(result.error_code) == 0, result
    return results


def broker_configs(kafka: Any) -> dict[str, dict[str, str | None]]:
    """What each broker itself holds: the cluster default, its own dynamic configs and the
    attacked logger's level."""
    state: dict[str, dict[str, str | None]] = {}
    for node, (_, port) in sorted(kafka.broker_addresses.items()):
        default, own, loggers = describe(
            port, [(BROKER, ""), (BROKER, str(node)), (BROKER_LOGGER, str(node))]
        )
        state[f"default@{node}"] = {c.name: c.value for c in default.configs}
        state[f"broker {node}"] = {
            c.name: c.value for c in own.configs if int(c.config_source) == DYNAMIC_BROKER_CONFIG
        }
        state[f"loggers {node}"] = {c.name: c.value for c in loggers.configs if c.name == LOGGER}
    return state


def settled_configs(kafka: Any) -> dict[str, dict[str, str | None]]:
    """The brokers' configs once every change committed before the call is applied on each."""
    fence(kafka.bootstrap_servers, kafka.broker_addresses.values())
    return broker_configs(kafka)


def incremental_request(*resources: tuple[int, str, dict[str, tuple[int, str | None]]]) -> Any:
    """IncrementalAlterConfigs v1: (type, name, {key: (op, value)}) per resource."""
    m = importlib.import_module(request_class(44, 1).__module__)
    return build(
        m.IncrementalAlterConfigsRequest,
        resources=tuple(
            build(
                m.AlterConfigsResource,
                resource_type=t,
                resource_name=n,
                configs=tuple(
                    build(m.AlterableConfig, name=k, config_operation=op, value=v)
                    for k, (op, v) in ops.items()
                ),
            )
            for t, n, ops in resources
        ),
        validate_only=False,
    )


def legacy_request(*resources: tuple[int, str, dict[str, str]]) -> Any:
    """The legacy AlterConfigs v2 (full replacement): (type, name, {key: value}) per resource."""
    m = importlib.import_module(request_class(33, 2).__module__)
    return build(
        m.AlterConfigsRequest,
        resources=tuple(
            build(
                m.AlterConfigsResource,
                resource_type=t,
                resource_name=n,
                configs=tuple(build(m.AlterableConfig, name=k, value=v) for k, v in cfg.items()),
            )
            for t, n, cfg in resources
        ),
        validate_only=False,
    )


def codes(response: Any) -> list[tuple[int, str, int]]:
    """(resource type, name, error code) of each result."""
    return [(int(r.resource_type), r.resource_name, int(r.error_code)) for r in response.responses]


def alter_directly(kafka: Any, resource_type: int, name: str, ops: dict[str, str | None]) -> None:
    """SET (or DELETE, for None) configs of a resource on the brokers themselves, no proxy."""
    # A broker's own configs (and loggers) go to that broker; the rest to any.
    node = int(name) if resource_type in (BROKER, BROKER_LOGGER) and name else 1
    port = kafka.broker_addresses[node][1]
    request = incremental_request(
        (
            resource_type,
            name,
            {k: (SET, v) if v is not None else (DELETE, None) for k, v in ops.items()},
        )
    )
    wire = WireClient("127.0.0.1", port)
    try:
        assert [c for *_, c in codes(wire.request(request))] == [0]
    finally:
        wire.close()


@pytest.fixture
def restored(kafka: Any) -> Iterator[dict[str, dict[str, str | None]]]:
    """The brokers' configs before the test; whatever differs afterwards (a grant used, or an
    attack that got through) is put back on the brokers directly."""
    before = settled_configs(kafka)
    try:
        yield before
    finally:
        after = settled_configs(kafka)
        for node in sorted(kafka.broker_addresses):
            if node == 1:
                _restore(kafka, BROKER, "", before["default@1"], after["default@1"])
            _restore(kafka, BROKER, str(node), before[f"broker {node}"], after[f"broker {node}"])
            _restore(
                kafka, BROKER_LOGGER, str(node), before[f"loggers {node}"], after[f"loggers {node}"]
            )
        assert settled_configs(kafka) == before


def _restore(
    kafka: Any,
    resource_type: int,
    name: str,
    before: dict[str, str | None],
    after: dict[str, str | None],
) -> None:
    changed = {
        k: before.get(k) for k in before.keys() | after.keys() if before.get(k) != after.get(k)
    }
    if changed:
        alter_directly(kafka, resource_type, name, changed)


def dynamic_group_configs(kafka: Any, group: str) -> dict[str, str | None]:
    """A group's own configs on a broker (the rest are the broker's defaults)."""
    (result,) = describe(kafka.broker_addresses[1][1], [(GROUP, group)])
    return {c.name: c.value for c in result.configs if int(c.config_source) == GROUP_CONFIG}


def client_metrics_configs(kafka: Any, name: str) -> dict[str, str | None]:
    """A client-metrics subscription's configs on a broker (none: it does not exist)."""
    (result,) = describe(kafka.broker_addresses[1][1], [(CLIENT_METRICS, name)])
    return {
        c.name: c.value for c in result.configs if int(c.config_source) == CLIENT_METRICS_CONFIG
    }


def topic_config(kafka: Any, topic: str, key: str) -> str | None:
    """One topic config as a broker reports it."""
    (result,) = describe(kafka.broker_addresses[1][1], [(TOPIC, topic)])
    return next(c.value for c in result.configs if c.name == key)


def make_topics(kafka: Any, *names: str, configs: dict[str, str] | None = None) -> None:
    """Create topics on the brokers directly, known to every broker before returning."""
    direct = AdminClient({"bootstrap.servers": kafka.bootstrap_servers, "log_level": 3})
    futures = direct.create_topics([NewTopic(n, 1, 1, config=dict(configs or {})) for n in names])
    for future in futures.values():
        future.result(30)
    fence(kafka.bootstrap_servers, kafka.broker_addresses.values())


def drop_topics(kafka: Any, *names: str) -> None:
    """Delete topics on the brokers directly (those still there)."""
    direct = AdminClient({"bootstrap.servers": kafka.bootstrap_servers, "log_level": 3})
    for future in direct.delete_topics(list(names)).values():
        with contextlib.suppress(KafkaException):  # already gone
            future.result(30)


# --- clients ------------------------------------------------------------------------------------


def kafka_python(bootstrap: str, user: tuple[str, str] | None = None) -> Any:
    """kafka-python's KafkaAdminClient, anonymous or with SCRAM-SHA-512."""
    sasl: dict[str, Any] = {}
    if user is not None:
        sasl = {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": user[0],
            "sasl_plain_password": user[1],
        }
    return KafkaAdminClient(bootstrap_servers=bootstrap, client_id="bcfg-attack", **sasl)


def kp_send(admin: Any, resources: list[Any], incremental: bool) -> Any:
    """Send kafka-python's own (Incremental)AlterConfigs request as built: its public API
    refuses a broker resource named "" (the cluster default), an attacker's client need not.
    A broker's own configs go to that broker (KRaft refuses them elsewhere); the rest to any."""
    request = KafkaAdminClient._alter_configs_request(resources, incremental=incremental)
    names = {r.name for r in resources if r.resource_type is ConfigResourceType.BROKER and r.name}
    node = int(names.pop()) if len(names) == 1 else None
    return admin._manager.run(admin._manager.send, request, node)


def confluent(bootstrap: str, user: tuple[str, str]) -> AdminClient:
    return AdminClient(
        {
            "bootstrap.servers": bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user[0],
            "sasl.password": user[1],
            "log_level": 3,
        }
    )


def confluent_set(
    admin: AdminClient, resource_type: ResourceType, name: str, key: str, value: str
) -> Any:
    """incremental_alter_configs SET of one key; the KafkaError (None if it went through)."""
    entry = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(resource_type, name, incremental_configs=[entry])
    try:
        admin.incremental_alter_configs([resource])[resource].result(30)
    except KafkaException as exc:
        return exc.args[0]
    return None


def kafka_configs(
    kafka: Any, bootstrap: str, *args: str, config: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """`kafka-configs --alter` through a proxy (with a SCRAM `--command-config` if given)."""
    auth = ["--command-config", str(config)] if config is not None else []
    return tool(kafka, "kafka-configs", "--bootstrap-server", bootstrap, *auth, "--alter", *args)


def concurrently(calls: Sequence[Callable[[], T]]) -> list[T]:
    """Run the calls at once (CLI JVMs start slowly); their results in order."""
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(lambda call: call(), calls))


def records(proxy: ProxyProcess) -> list[dict[str, Any]]:
    """The proxy's audit records of non-topic config resources, in order."""
    return [e for e in proxy.audit_events() if e["action"] == "alter_broker_config"]


def denied_message(output: str) -> str:
    """The PolicyViolationException's message as a Kafka tool prints it."""
    match = re.search(r"PolicyViolationException: (.*)", output)
    assert match is not None, output
    return match.group(1)


# --- unlisted principals -------------------------------------------------------------------------


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
        assert denied_message(output) == (
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
    kafka: Any, sasl_proxy: ProxyProcess, restored: dict[str, Any], tmp_path: Path
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
    seen = len(records(sasl_proxy))
    results = concurrently(
        [
            lambda entity=entity, change=change: kafka_configs(
                kafka, sasl_proxy.bootstrap, *entity, "--add-config", change, config=bob
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
    new = records(sasl_proxy)[seen:]
    assert sorted(
        (e["principal"], e["resource_type"], e["resource"], e["decision"]) for e in new
    ) == [
        ("User:bob", "broker", "1", "denied"),
        ("User:bob", "broker_logger", "2", "denied"),
        ("User:bob", "client_metrics", metrics, "denied"),
        ("User:bob", "group", group, "denied"),
    ]


def test_legacy_alter_configs_from_kafka_python_is_refused(
    kafka: Any, enforcing_proxy: ProxyProcess, sasl_proxy: ProxyProcess, restored: dict[str, Any]
) -> None:
    anonymous = kafka_python(enforcing_proxy.bootstrap)
    alice = kafka_python(sasl_proxy.bootstrap, ALICE)
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
        assert (error, message) == (
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
    kafka: Any, sasl_proxy: ProxyProcess, restored: dict[str, Any]
) -> None:
    bob, alice = confluent(sasl_proxy.bootstrap, BOB), confluent(sasl_proxy.bootstrap, ALICE)
    for node in sorted(kafka.broker_addresses):
        error = confluent_set(bob, ResourceType.BROKER, str(node), "min.insync.replicas", "1")
        assert error is not None and error.code() == POLICY_VIOLATION, error
        assert f"User:bob may not change min.insync.replicas on broker '{node}'" in error.str()
        # Granted to alice, but not beyond the grant's bounds.
        error = confluent_set(
            alice, ResourceType.BROKER, str(node), "log.retention.ms", str(90 * DAY_MS)
        )
        assert error is not None and error.str() == (
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


def test_a_granted_change_reaches_the_brokers_only_within_the_grant_and_the_topic_rules(
    kafka: Any, sasl_proxy: ProxyProcess, restored: dict[str, Any], tmp_path: Path
) -> None:
    tag = uid()
    own, inherits = f"bcfg-short.{tag}-own", f"bcfg-short.{tag}-inherits"
    make_topics(kafka, own, configs={"retention.ms": str(DAY_MS)})
    make_topics(kafka, inherits)
    three_days, four_days = str(3 * DAY_MS), str(4 * DAY_MS)
    alice = kafka_python(sasl_proxy.bootstrap, ALICE)
    seen = len(records(sasl_proxy))

    def alter(name: str, **ops: tuple[str, str | None]) -> tuple[int, str | None]:
        resource = KpConfigResource(ConfigResourceType.BROKER, name, configs=ops)
        (result,) = kp_send(alice, [resource], incremental=True).responses
        return result.error_code, result.error_message

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
        bob = confluent(sasl_proxy.bootstrap, BOB)
        bob.delete_topics([inherits])[inherits].result(30)
        granted = kafka_configs(
            kafka,
            sasl_proxy.bootstrap,
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
    new = records(sasl_proxy)[seen:]
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
    kafka: Any, sasl_proxy: ProxyProcess, restored: dict[str, Any]
) -> None:
    # cleanup-immutable: no topic's cleanup.policy may change, inherited or not.
    topics = [f"bcfg.inherit-{uid()}-{i}" for i in range(4)]
    make_topics(kafka, *topics)
    alice = kafka_python(sasl_proxy.bootstrap, ALICE)
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
        result.error_message,
    )
    assert match is not None, result.error_message
    total, named, more = int(match.group(1)), match.group(2), int(match.group(3))
    # Every topic in the cluster that inherits the policy counts, these four among them.
    assert total >= len(topics) and more == total - 3
    assert named.count("[cleanup-immutable]") == 3
    assert "changes cleanup.policy from 'delete' to 'compact'" in named
    assert set(topics) <= set(records(sasl_proxy)[-1]["request"]["outside"])
    assert settled_configs(kafka) == restored
    drop_topics(kafka, *topics)


# --- repeated and raced --------------------------------------------------------------------------


def test_fifty_raced_attempts_through_several_clients_never_reach_the_brokers(
    kafka: Any, enforcing_proxy: ProxyProcess, sasl_proxy: ProxyProcess, restored: dict[str, Any]
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
        bob = confluent(sasl_proxy.bootstrap, BOB)
        start.wait(30)
        results = []
        for i in range(6):
            error = confluent_set(
                bob, ResourceType.BROKER, str(nodes[i % 3]), "log.retention.ms", forever
            )
            results.append(0 if error is None else error.code())
        collect(results)

    def kafka_python_as(user: tuple[str, str], key: str, value: str, incremental: bool) -> None:
        admin = kafka_python(sasl_proxy.bootstrap, user)
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

    before_anonymous, before_sasl = len(records(enforcing_proxy)), len(records(sasl_proxy))
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
    new = records(enforcing_proxy)[before_anonymous:] + records(sasl_proxy)[before_sasl:]
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
    kafka: Any, sasl_proxy: ProxyProcess, restored: dict[str, Any]
) -> None:
    """Removing a topic's own retention.ms falls back to the cluster default: judged right after
    an allowed new default, it must be judged on that default, not on one cached or read from a
    broker that has not applied it yet (before the fix, the proxy's re-read could reach a broker
    a moment behind the controller and cache the old default: the removal got through about one
    round in eight, leaving the topic 3 days against short-retention's 2)."""
    topic = f"bcfg-short.{uid()}-coherent"
    one_day, three_days = str(DAY_MS), str(3 * DAY_MS)
    make_topics(kafka, topic, configs={"retention.ms": one_day})
    alice = kafka_python(sasl_proxy.bootstrap, ALICE)

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
            assert (probe.error_code, probe.error_message) == (
                POLICY_VIOLATION,
                f"[short-retention] topic '{topic}' sets retention.ms to {three_days} (3d); "
                "the limit is 172800000 (2d)",
            ), f"round {round_}"
        assert topic_config(kafka, topic, "retention.ms") == one_day
    finally:
        alice.close()
        drop_topics(kafka, topic)
