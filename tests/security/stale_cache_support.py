"""Two proxies (two workers of one, or two processes) in front of one cluster, a connection to
each, the raw requests the stale-cache races send, and the brokers' own view of the outcome."""

from __future__ import annotations

import importlib
import itertools
import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from harness.messages import build
from harness.proxy_process import ProxyProcess
from harness.wire import WireClient
from kafka_policy_proxy.codec.registry import request_class
from tests.security.raw import client, fence, wait_until

TOPIC = 2
POLICY = """\
version: 1
rules:
  - name: min-isr
    configs:
      min.insync.replicas: {min: 2}
  - name: cleanup-immutable
    configs:
      cleanup.policy: {immutable: true}
  - name: growth
    partitions: {max_increase: 2}
"""
# Long enough that a cached fact outlives every race below: what the races test is whether a
# mutation takes the cache at all.
TTL_S = 60
_ports = itertools.count(17000, 40)


def start_proxy(kafka: Any, workdir: Path, workers: int = 1) -> ProxyProcess:
    """A proxy enforcing POLICY with a long cache, writing an audit file (one per worker)."""
    workdir.mkdir(parents=True, exist_ok=True)
    policy = workdir / "policy.yaml"
    policy.write_text(POLICY)
    port = next(_ports)
    process = ProxyProcess(
        workdir,
        kafka.bootstrap_servers,
        port,
        port + 10,
        extra={
            "workers": workers,
            "policy": {"file": str(policy), "watch": False},
            "audit": {"file": str(workdir / "audit.jsonl")},
            "cluster_state": {"ttl_s": TTL_S},
        },
    )
    process.audit_path = workdir / "audit.jsonl"
    return process


def stop(processes: list[ProxyProcess], keep: Path | None = None) -> None:
    """Stop the proxies; copy their logs to `keep` (a failed test's evidence)."""
    for process in processes:
        process.stop()
        if keep is not None:
            shutil.copy(process.log_path, keep / f"{process.bootstrap_port}.log")


def audit_records(workdir: Path) -> list[dict[str, Any]]:
    """Every record in the proxy's audit files (one per worker)."""
    return [
        json.loads(line)
        for path in sorted(workdir.glob("audit*.jsonl"))
        for line in path.read_text().splitlines()
        if line
    ]


def connections_to_distinct_workers(
    proxy: ProxyProcess, workdir: Path, topic: str, count: int = 2
) -> list[WireClient]:
    """One connection to each of `count` different workers, each of which has just read
    `topic` (a validate-only alter, allowed, that names the worker in its audit record)."""
    chosen: dict[str, WireClient] = {}
    spare: list[WireClient] = []
    for _ in range(200):
        wire = client(proxy.bootstrap)
        assert validate_only_alter(wire, topic) == 0
        address = f"127.0.0.1:{wire.sock.getsockname()[1]}"

        def worker_of(address: str = address) -> str | None:
            for record in audit_records(workdir):
                if record["client"] == address:
                    return str(record["proxy_id"])
            return None

        assert wait_until(lambda: worker_of() is not None)
        worker = worker_of()
        assert worker is not None
        if worker in chosen:
            spare.append(wire)
        else:
            chosen[worker] = wire
        if len(chosen) == count:
            break
    for wire in spare:
        wire.close()
    assert len(chosen) == count, f"connections reached only {sorted(chosen)}"
    return list(chosen.values())


def _module(key: int, version: int) -> Any:
    return importlib.import_module(request_class(key, version).__module__)


def incremental_alter(wire: WireClient, topic: str, *ops: tuple[str, int, str | None]) -> int:
    """IncrementalAlterConfigs v1 on a topic: (name, operation, value) ops; the error code."""
    m = _module(44, 1)
    configs = tuple(
        build(m.AlterableConfig, name=n, config_operation=op, value=v) for n, op, v in ops
    )
    resource = build(
        m.AlterConfigsResource, resource_type=TOPIC, resource_name=topic, configs=configs
    )
    request = build(m.IncrementalAlterConfigsRequest, resources=(resource,), validate_only=False)
    (answer,) = wire.request(request).responses
    return int(answer.error_code)


def validate_only_alter(wire: WireClient, topic: str) -> int:
    """A validate-only IncrementalAlterConfigs the policy allows: the proxy reads the topic."""
    m = _module(44, 1)
    config = build(m.AlterableConfig, name="retention.ms", config_operation=0, value="3600000")
    resource = build(
        m.AlterConfigsResource, resource_type=TOPIC, resource_name=topic, configs=(config,)
    )
    request = build(m.IncrementalAlterConfigsRequest, resources=(resource,), validate_only=True)
    (answer,) = wire.request(request).responses
    return int(answer.error_code)


def legacy_alter(wire: WireClient, topic: str, **configs: str) -> int:
    """AlterConfigs v2 (a full replacement) with only these configs; the error code."""
    m = _module(33, 2)
    entries = tuple(
        build(m.AlterableConfig, name=n.replace("_", "."), value=v) for n, v in configs.items()
    )
    resource = build(
        m.AlterConfigsResource, resource_type=TOPIC, resource_name=topic, configs=entries
    )
    request = build(m.AlterConfigsRequest, resources=(resource,), validate_only=False)
    (answer,) = wire.request(request).responses
    return int(answer.error_code)


def create_partitions(wire: WireClient, topic: str, count: int) -> int:
    """CreatePartitions v3 to `count` partitions; the error code."""
    m = _module(37, 3)
    entry = build(m.CreatePartitionsTopic, name=topic, count=count, assignments=None)
    request = build(m.CreatePartitionsRequest, topics=(entry,), timeout=30_000, validate_only=False)
    (answer,) = wire.request(request).results
    return int(answer.error_code)


def create_topic(wire: WireClient, topic: str, partitions: int, **configs: str) -> int:
    """CreateTopics v7, replication 1 and these configs; the error code."""
    m = _module(19, 7)
    entries = tuple(
        build(m.CreatableTopicConfig, name=n.replace("_", "."), value=v) for n, v in configs.items()
    )
    topic_entry = build(
        m.CreatableTopic,
        name=topic,
        num_partitions=partitions,
        replication_factor=1,
        assignments=(),
        configs=entries,
    )
    request = build(
        m.CreateTopicsRequest, topics=(topic_entry,), timeout=30_000, validate_only=False
    )
    (answer,) = wire.request(request).topics
    return int(answer.error_code)


def delete_topic(wire: WireClient, topic: str) -> int:
    """DeleteTopics v6 by name; the error code."""
    m = _module(20, 6)
    state = build(m.DeleteTopicState, name=topic, topic_id=uuid.UUID(int=0))
    request = build(m.DeleteTopicsRequest, topics=(state,), timeout=30_000)
    (answer,) = wire.request(request).responses
    return int(answer.error_code)


class Brokers:
    """The cluster's own view, through confluent-kafka's AdminClient on the brokers."""

    def __init__(self, kafka: Any) -> None:
        self._kafka = kafka
        self._admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})

    def settled(self) -> Brokers:
        """Once every broker has applied every change made so far."""
        fence(self._kafka.bootstrap_servers, self._kafka.broker_addresses.values())
        return self

    def config(self, topic: str, key: str) -> str:
        resource = ConfigResource(ResourceType.TOPIC, topic)
        configs = self._admin.describe_configs([resource])[resource].result(30)
        return str(configs[key].value)

    def partitions(self, topic: str) -> int:
        metadata = self._admin.list_topics(topic, timeout=30)
        return len(metadata.topics[topic].partitions)

    def create(self, topic: str, partitions: int, **configs: str) -> None:
        """Create a topic on the cluster itself (outside the policy)."""
        from confluent_kafka.admin import NewTopic

        spec = NewTopic(
            topic,
            partitions,
            1,
            config={k.replace("_", "."): v for k, v in configs.items()},
        )
        self._admin.create_topics([spec])[topic].result(30)
        assert wait_until(lambda: topic in self._admin.list_topics(timeout=30).topics)
        self.settled()


def unique(prefix: str) -> str:
    return f"{prefix}.{uuid.uuid4().hex[:10]}"


def pairs(connections: list[WireClient]) -> Iterator[tuple[WireClient, WireClient]]:
    """Every ordered pair of distinct connections."""
    return ((a, b) for a, b in itertools.permutations(connections, 2))
