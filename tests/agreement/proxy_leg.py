"""The proxy's leg of the agreement test: each described request as a Kafka wire frame, through
the proxy's own filter chain, with the cluster served by an in-memory reader.

The decisions are read from the decision records the proxy writes, as an operator would; a
topic the judge leaves undecided (an unknown topic id) must never reach the broker: the proxy
answers it UNKNOWN_TOPIC_ID itself.
"""

from __future__ import annotations

import asyncio
import importlib
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from kio.schema.errors import ErrorCode

from harness.messages import build
from kafka_policy_proxy.codec.framing import framed
from kafka_policy_proxy.codec.header import peek_request_header, request_header
from kafka_policy_proxy.codec.registry import decode_exact, encode, request_class, response_class
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.model import ConfigOp
from kafka_policy_proxy.policy.offline.request_spec import (
    AlterConfigsSpec,
    AutoCreateSpec,
    CreatePartitionsSpec,
    CreateTopicsSpec,
    DeleteRecordsSpec,
    DeleteTopicsSpec,
    IncrementalAlterConfigsSpec,
    ReassignSpec,
    RequestSpec,
)
from kafka_policy_proxy.proxy.audit.recorder import DecisionRecorder
from kafka_policy_proxy.proxy.filters.api import Answer, RequestContext
from kafka_policy_proxy.proxy.filters.assembly import proxy_chain
from tests.agreement.entry_points import Outcomes, Setting
from tests.unit.proxy.contexts import settle
from tests.unit.proxy.enforcement_fakes import FakeReader, live_facts

TOPIC_RESOURCE = 2
OPS = {ConfigOp.SET: 0, ConfigOp.DELETE: 1, ConfigOp.APPEND: 2, ConfigOp.SUBTRACT: 3}


class MemorySink:
    """An audit sink that keeps the records."""

    enabled = True

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def write(self, record: Mapping[str, Any]) -> None:
        self.records.append(dict(record))

    async def close(self) -> None:
        return None


class NoListeners:
    """The address filter's view of the server; its hooks never run here (no responses)."""

    def endpoint(self, node_id: int) -> tuple[str, int]:
        return "127.0.0.1", 9200 + node_id

    def ready(self, nodes: dict[int, tuple[str, int]]) -> bool:
        return True

    async def ensure(self, nodes: dict[int, tuple[str, int]]) -> None:
        return None


def wire_id(topic_id: str) -> uuid.UUID:
    """A wire topic id (a UUID) for the corpus's id strings; a UUID string stays itself."""
    try:
        return uuid.UUID(topic_id)
    except ValueError:
        return uuid.uuid5(uuid.NAMESPACE_URL, topic_id)


def proxy(setting: Setting) -> Outcomes:
    """Every request of the corpus through the proxy's filter chain; results from its records."""
    return asyncio.run(_run(setting))


async def _run(setting: Setting) -> Outcomes:
    cluster = setting.cluster
    # The wire carries UUIDs: the cluster the proxy reads has the same topics with UUID ids.
    served = InMemoryCluster(
        tuple(
            replace(t, topic_id=None if t.topic_id is None else str(wire_id(t.topic_id)))
            for t in cluster.topics
        ),
        cluster.brokers,
        cluster.defaults,
    )
    sink = MemorySink()
    chain = proxy_chain(
        listeners=NoListeners(),
        policy=lambda: setting.policy,
        facts=live_facts(FakeReader(served), clock=lambda: setting.now),
        recorder=DecisionRecorder([sink], proxy_id="proxy-1", cluster_id=lambda: "agreement"),
        legacy_error_code=44,
    )
    results: Outcomes = {}
    for index, spec in enumerate(setting.corpus):
        ctx = _context(spec, index)
        before = len(sink.records)
        verdict = await settle(chain.on_request(ctx))
        # No broker answers here: the connection's end gives its budget turns back.
        chain.on_close(ctx.connection_id)
        written = sink.records[before:]
        assert len(written) <= 1, written
        if written:
            record = written[0]
            rules = tuple(v["rule"] for v in record["violations"])
            results[index] = (record["topic"], record["decision"], rules)
        elif isinstance(spec, DeleteTopicsSpec) and spec.topics[0].topic_id is not None:
            # Undecided: the proxy answers it, as a broker answers an id it does not know.
            assert isinstance(verdict, Answer), verdict
            (answer,) = decode_exact(response_class(20, 6), verdict.body).responses
            assert answer.error_code is ErrorCode.unknown_topic_id, answer
            results[index] = ("", None, ())
    return results


def _context(spec: RequestSpec, correlation_id: int) -> RequestContext:
    key, version, message = _message(spec)
    frame = framed(request_header(key, version, correlation_id, spec.client_id), encode(message))
    header = peek_request_header(frame, 4)
    return RequestContext(1, "bootstrap", spec.client_address, spec.principal, header, frame)


def _module(key: int, version: int) -> Any:
    return importlib.import_module(request_class(key, version).__module__)


def _message(spec: RequestSpec) -> tuple[int, int, Any]:
    only = spec.validate_only
    if isinstance(spec, CreateTopicsSpec):
        m = _module(19, 7)
        topics = tuple(
            build(
                m.CreatableTopic,
                name=t.name,
                num_partitions=-1 if t.assignment else t.partitions,
                replication_factor=-1 if t.assignment else t.replication_factor,
                assignments=tuple(
                    build(m.CreatableReplicaAssignment, partition_index=p, broker_ids=tuple(r))
                    for p, r in (t.assignment or {}).items()
                ),
                configs=tuple(
                    build(m.CreatableTopicConfig, name=n, value=v) for n, v in t.configs.items()
                ),
            )
            for t in spec.topics
        )
        return (
            19,
            7,
            build(m.CreateTopicsRequest, topics=topics, timeout=30_000, validate_only=only),
        )
    if isinstance(spec, AutoCreateSpec):
        m = _module(3, 12)
        topics = tuple(
            build(m.MetadataRequestTopic, topic_id=None, name=t.name) for t in spec.topics
        )
        request = build(
            m.MetadataRequest,
            topics=topics,
            allow_auto_topic_creation=True,
            include_topic_authorized_operations=False,
        )
        return 3, 12, request
    if isinstance(spec, AlterConfigsSpec):
        m = _module(33, 2)
        resources = tuple(
            build(
                m.AlterConfigsResource,
                resource_type=TOPIC_RESOURCE,
                resource_name=t.name,
                configs=tuple(
                    build(m.AlterableConfig, name=n, value=v) for n, v in t.configs.items()
                ),
            )
            for t in spec.topics
        )
        return 33, 2, build(m.AlterConfigsRequest, resources=resources, validate_only=only)
    if isinstance(spec, IncrementalAlterConfigsSpec):
        m = _module(44, 1)
        resources = tuple(
            build(
                m.AlterConfigsResource,
                resource_type=TOPIC_RESOURCE,
                resource_name=t.name,
                configs=tuple(
                    build(m.AlterableConfig, name=c.name, config_operation=OPS[c.op], value=c.value)
                    for c in t.changes
                ),
            )
            for t in spec.topics
        )
        return (
            44,
            1,
            build(m.IncrementalAlterConfigsRequest, resources=resources, validate_only=only),
        )
    if isinstance(spec, CreatePartitionsSpec):
        m = _module(37, 3)
        topics = tuple(
            build(
                m.CreatePartitionsTopic,
                name=t.name,
                count=t.count,
                assignments=None
                if t.assignment is None
                else tuple(
                    build(m.CreatePartitionsAssignment, broker_ids=tuple(r)) for r in t.assignment
                ),
            )
            for t in spec.topics
        )
        return (
            37,
            3,
            build(m.CreatePartitionsRequest, topics=topics, timeout=30_000, validate_only=only),
        )
    if isinstance(spec, ReassignSpec):
        m = _module(45, 0)
        topics = tuple(
            build(
                m.ReassignableTopic,
                name=t.name,
                partitions=tuple(
                    build(
                        m.ReassignablePartition,
                        partition_index=p,
                        replicas=None if r is None else tuple(r),
                    )
                    for p, r in t.partitions.items()
                ),
            )
            for t in spec.topics
        )
        return 45, 0, build(m.AlterPartitionReassignmentsRequest, topics=topics, timeout=30_000)
    if isinstance(spec, DeleteTopicsSpec):
        m = _module(20, 6)
        topics = tuple(
            build(
                m.DeleteTopicState,
                name=t.name,
                topic_id=uuid.UUID(int=0) if t.topic_id is None else wire_id(t.topic_id),
            )
            for t in spec.topics
        )
        return 20, 6, build(m.DeleteTopicsRequest, topics=topics, timeout=30_000)
    assert isinstance(spec, DeleteRecordsSpec)
    m = _module(21, 2)
    topics = tuple(
        build(
            m.DeleteRecordsTopic,
            name=t.name,
            partitions=tuple(
                build(m.DeleteRecordsPartition, partition_index=p, offset=o)
                for p, o in t.offsets.items()
            ),
        )
        for t in spec.topics
    )
    return 21, 2, build(m.DeleteRecordsRequest, topics=topics, timeout=30_000)
