"""Attack: make the group coordinator create topics with a StreamsGroupHeartbeat (KIP-1071).

A broker with the Streams rebalance protocol creates the internal topics a member's topology
declares, with the partitions, replication factor and configs the member chose. Kafka 4.1
keeps the protocol behind unstable versions, so this module runs its own one-broker cluster
with them enabled (format then finalizes streams.version=1). Every outcome is read on the
broker: first that the attack works there directly, then that through the proxy a denied
topology creates nothing and an allowed one is created, both recorded.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from harness.local_kafka import LocalKafka
from harness.messages import build
from harness.proxy_process import ProxyProcess
from harness.streams_messages import Internal, heartbeat
from harness.wire import WireClient
from kafka_policy_proxy.codec.registry import request_class
from tests.integration.admin_clients import BrokerView
from tests.security.raw import client, create, wait_until

pytestmark = pytest.mark.integration

PORT_BASE = 16092
PROXY_BOOTSTRAP, PROXY_NODE_BASE = 18200, 18210
STREAMS_BROKER = {
    "unstable.api.versions.enable": "true",
    "unstable.feature.versions.enable": "true",
    "group.coordinator.rebalance.protocols": "classic,consumer,streams",
}
POLICY = """
version: 1
rules:
  - name: small
    partitions: {max: 12}
  - name: no-unclean-election
    configs:
      unclean.leader.election.enable: {values: ['false']}
  - name: streams-internal-topics
    streams: {}
"""
# The changelog, smaller: a light one-broker JVM need not hold 1,000 partitions.
HOSTILE = {"retention.ms": "1000", "unclean.leader.election.enable": "true"}
RETRIABLE = {
    ErrorCode.coordinator_not_available,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.not_coordinator,
}


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    cluster = LocalKafka(
        tmp_path_factory.mktemp("streams-kafka") / "cluster",
        brokers=1,
        port_base=PORT_BASE,
        broker_props=STREAMS_BROKER,
        light_jvm=True,
    )
    cluster.up(timeout=180)
    try:
        direct = client(cluster.bootstrap_servers)
        try:
            create(direct, "orders")  # 1 partition, the source topic of every topology
        finally:
            direct.close()
        yield cluster
    finally:
        cluster.down()


@pytest.fixture(scope="module")
def proxy(kafka: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    workdir = tmp_path_factory.mktemp("streams-proxy")
    policy = workdir / "policy.yaml"
    policy.write_text(POLICY)
    process = ProxyProcess(
        workdir,
        kafka.bootstrap_servers,
        PROXY_BOOTSTRAP,
        PROXY_NODE_BASE,
        extra={"policy": {"file": str(policy)}, "audit": {"file": str(workdir / "audit.jsonl")}},
    )
    process.audit_path = workdir / "audit.jsonl"
    try:
        yield process
    finally:
        assert process.stop() == 0


def join(bootstrap: str, request: Any) -> Any:
    """Send a join until the group coordinator has loaded; return its answer."""
    wire = client(bootstrap)
    m = request_class(10, 4)
    find = build(m, key_type=0, coordinator_keys=(request.group_id,))
    answers: list[Any] = []
    try:
        wire.request(find)  # creates __consumer_offsets on first use

        def answered() -> bool:
            answers.append(wire.request(request))
            return answers[-1].error_code not in RETRIABLE

        assert wait_until(answered, timeout=60)
    finally:
        wire.close()
    return answers[-1]


def topology(app: str, partitions: int, configs: dict[str, str]) -> tuple[str, Any]:
    """A join whose changelog the broker creates with `configs` and as many partitions as the
    widest source: `partitions` on a repartition topic (a changelog may not declare a count)."""
    name = f"{app}-store-changelog"
    repartitions = [Internal(f"{app}-by-key-repartition", partitions)] if partitions else []
    return name, heartbeat(
        app,
        sources=["orders"],
        changelogs=[Internal(name, 0, 1, configs)],
        repartitions=repartitions,
    )


def test_the_attack_creates_topics_on_the_broker_itself(kafka: Any) -> None:
    # The control: what a heartbeat the proxy forwarded untouched used to do.
    name, request = topology(f"direct-{uuid.uuid4().hex[:8]}", 40, HOSTILE)
    response = join(kafka.bootstrap_servers, request)
    assert response.error_code is ErrorCode.none
    broker = BrokerView(kafka.bootstrap_servers)
    assert wait_until(lambda: broker.describe(name) is not None, timeout=60)
    info = broker.describe(name)
    assert info is not None and len(info.partitions) == 40
    assert info.configs["unclean.leader.election.enable"].value == "true"


def test_a_denied_topology_creates_nothing_and_is_recorded(kafka: Any, proxy: ProxyProcess) -> None:
    app = f"bad-{uuid.uuid4().hex[:8]}"
    name, request = topology(app, 40, HOSTILE)
    response = join(proxy.bootstrap, request)
    assert response.error_code is ErrorCode.streams_invalid_topology
    assert name in response.error_message and "[small]" in response.error_message
    # The broker never saw the group: it does not know it.
    describe = build(request_class(89, 0), group_ids=(app,), include_authorized_operations=False)
    wire = client(kafka.bootstrap_servers)
    try:
        (group,) = wire.request(describe).groups
    finally:
        wire.close()
    assert group.error_code is ErrorCode.group_id_not_found
    # An allowed join after it is created; the coordinator works in order, so by then the
    # denied topic would exist had the broker been asked to create it.
    allowed, ok = topology(f"ok-{uuid.uuid4().hex[:8]}", 0, {"cleanup.policy": "compact"})
    assert join(proxy.bootstrap, ok).error_code is ErrorCode.none
    broker = BrokerView(kafka.bootstrap_servers)
    assert wait_until(lambda: broker.describe(allowed) is not None, timeout=60)
    assert name not in broker.topics()
    records = {e["topic"]: e for e in proxy.audit_events() if e.get("topic") in {name, allowed}}
    assert records[name]["decision"] == "denied"
    assert records[name]["api"] == "StreamsGroupHeartbeat"
    assert {v["rule"] for v in records[name]["violations"]} >= {"small", "no-unclean-election"}
    assert records[allowed]["decision"] == "allowed"


def test_an_allowed_topology_is_created_as_declared(kafka: Any, proxy: ProxyProcess) -> None:
    name, request = topology(f"app-{uuid.uuid4().hex[:8]}", 0, {"cleanup.policy": "compact"})
    assert join(proxy.bootstrap, request).error_code is ErrorCode.none
    broker = BrokerView(kafka.bootstrap_servers)
    assert wait_until(lambda: broker.describe(name) is not None, timeout=60)
    info = broker.describe(name)
    assert info is not None and len(info.partitions) == 1  # as many as `orders`
    assert info.configs["cleanup.policy"].value == "compact"
    (record,) = [e for e in proxy.audit_events() if e.get("topic") == name]
    assert record["decision"] == "allowed" and record["action"] == "create"


def test_plain_heartbeats_reach_the_broker(kafka: Any, proxy: ProxyProcess) -> None:
    _, request = topology(f"beat-{uuid.uuid4().hex[:8]}", 0, {"cleanup.policy": "compact"})
    first = join(proxy.bootstrap, request)
    assert first.error_code is ErrorCode.none
    wire: WireClient = client(proxy.bootstrap)
    try:
        beat = heartbeat(request.group_id, member_epoch=int(first.member_epoch))
        beat = dataclasses.replace(beat, member_id=request.member_id)
        assert wire.request(beat).error_code is ErrorCode.none
    finally:
        wire.close()
