"""What the enforcement tests share: the three admin clients on the enforcing proxy (one set
for the package), a view of the brokers, topics made on the brokers directly, and how a
denial reads in each client."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka.admin import AdminClient, NewTopic

from harness.cited import cited
from harness.messages import metadata_request
from harness.proxy_process import ProxyProcess
from harness.wire import WireClient
from tests.integration.admin_clients import (
    AdminHarness,
    BrokerView,
    ConfluentAdmin,
    JavaAdmin,
    KafkaPythonAdmin,
    TopicOutcome,
    admin_clients,
    close_all,
)

CLASSES = {"java": JavaAdmin, "confluent": ConfluentAdmin, "kafka-python": KafkaPythonAdmin}


def clients_with(operation: str) -> list[str]:
    """The clients whose library has this admin operation (the others cannot be tested on it)."""
    return [
        name
        for name, cls in CLASSES.items()
        if getattr(cls, operation) is not getattr(AdminHarness, operation)
    ]


@pytest.fixture(scope="package")
def clients(enforcing_proxy: ProxyProcess, kafka: Any) -> Iterator[dict[str, AdminHarness]]:
    harnesses = admin_clients(enforcing_proxy.bootstrap, kafka.classpath())
    yield harnesses
    close_all(harnesses.values())


@pytest.fixture(scope="package")
def broker(kafka: Any) -> BrokerView:
    return BrokerView(kafka.bootstrap_servers)


@pytest.fixture(scope="package")
def direct(kafka: Any) -> AdminClient:
    """An admin client on the brokers themselves, to set up topics the policy would refuse."""
    return AdminClient({"bootstrap.servers": kafka.bootstrap_servers, "log_level": 3})


def uid() -> str:
    return uuid.uuid4().hex[:8]


def make_topic(direct: AdminClient, name: str, partitions: int = 1, replication: int = 1) -> None:
    """Create a topic on the brokers directly and wait until every broker's metadata has it."""
    for future in direct.create_topics([NewTopic(name, partitions, replication)]).values():
        future.result(30)
    metadata = metadata_request((name,))
    for node in direct.list_topics(timeout=30).brokers.values():
        client = WireClient(node.host, node.port)
        assert wait_for(lambda c=client: c.request(metadata).topics[0].error_code.value == 0)
        client.close()


def settled(direct: AdminClient) -> None:
    """Return once every broker has applied every metadata change committed before the call.

    KRaft's metadata is one ordered log, and the controller answers a change only once it is
    committed: a broker that shows a topic created now also shows whatever an earlier answered
    request changed. So "nothing changed" can be read at once, instead of after a sleep.
    """
    make_topic(direct, f"fence.{uid()}")


def by_topic(outcomes: list[TopicOutcome]) -> dict[str, TopicOutcome]:
    return {o.topic: o for o in outcomes}


def assert_denied(outcome: TopicOutcome, rule: str, proxy: ProxyProcess | None = None) -> None:
    """Denied by this rule: POLICY_VIOLATION naming it, or -1 where the version has no message.

    A client library that drops the message (kafka-python's reassignments) is checked against
    the proxy's audit log instead.
    """
    assert not outcome.ok, outcome
    if outcome.error == "POLICY_VIOLATION" and outcome.message is None and proxy is not None:
        rules = [
            v["rule"]
            for e in proxy.audit_events()
            if e["topic"] == outcome.topic and e["decision"] == "denied"
            for v in e["violations"]
        ]
        assert rule in rules, rules
    elif outcome.error == "POLICY_VIOLATION":
        assert f"[{rule}]" in (outcome.message or ""), outcome
        # The message ends with the id of the decision's record (a summary's for many topics).
        _, decision_id = cited(outcome.message)
        if proxy is not None and proxy.audit_path is not None:
            [record] = [e for e in proxy.audit_events() if e["decision_id"] == decision_id]
            assert record["decision"] == "denied" and record["topic"] in (outcome.topic, None)
    else:
        assert outcome.error == "UNKNOWN_SERVER_ERROR", outcome


def wait_for(check: Any, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def proxy_with_policy(
    kafka: Any, workdir: Path, policy: Mapping[str, Any], bootstrap_port: int, node_port_base: int
) -> Iterator[ProxyProcess]:
    """A proxy judging with `policy`, its audit log in `workdir/audit.jsonl`; stopped cleanly."""
    policy_file, audit = workdir / "policy.yaml", workdir / "audit.jsonl"
    policy_file.write_text(yaml.safe_dump(dict(policy)))
    process = ProxyProcess(
        workdir,
        kafka.bootstrap_servers,
        bootstrap_port,
        node_port_base,
        extra={"policy": {"file": str(policy_file)}, "audit": {"file": str(audit)}},
    )
    process.audit_path = audit
    try:
        yield process
    finally:
        assert process.stop() == 0
