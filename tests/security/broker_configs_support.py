"""What the broker-config attacks share: the SASL proxy with their policy, reading and restoring
the brokers' configs directly, request builders and the clients that send them."""

from __future__ import annotations

import contextlib
import importlib
import re
import subprocess
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
from kafka.admin import ConfigResourceType

from harness.messages import build
from harness.proxy_process import ProxyProcess, sasl_enforcing_proxy
from harness.wire import WireClient
from kafka_policy_proxy.codec.registry import request_class
from tests.integration.cluster_fixtures import TEST_POLICY
from tests.security.kafka_tools import tool
from tests.security.raw import fence

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


@pytest.fixture(scope="package")
def broker_configs_proxy(
    kafka: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProxyProcess]:
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
