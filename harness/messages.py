"""Build kio messages in tests and benches without caring which fields a version has."""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from kafka_policy_proxy.codec.registry import encode, request_class, response_class


def build(cls: Any, **values: Any) -> Any:
    """Instantiate cls from the values its version has; ints become timedeltas where needed."""
    kwargs = {}
    for field in dataclasses.fields(cls):
        if field.name not in values:
            continue
        value = values[field.name]
        kafka_type = field.metadata.get("kafka_type", "")
        if "timedelta" in kafka_type and isinstance(value, int):
            value = datetime.timedelta(milliseconds=value)
        elif kafka_type == "error_code" and isinstance(value, int):
            value = ErrorCode(value)
        kwargs[field.name] = value
    return cls(**kwargs)


def metadata_request(names: tuple[str, ...] | None = None) -> Any:
    """A Metadata v12 request for these topics (None: all topics), never auto-creating."""
    cls = request_class(3, 12)
    module = importlib.import_module(cls.__module__)
    topics = (
        None
        if names is None
        else tuple(module.MetadataRequestTopic(topic_id=None, name=name) for name in names)
    )
    return build(
        cls,
        topics=topics,
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


def metadata_response(version: int, topics: int = 3, partitions: int = 1) -> Any:
    """A Metadata response with brokers 1-3 on internal addresses."""
    m = importlib.import_module(response_class(3, version).__module__)
    brokers = tuple(
        build(m.MetadataResponseBroker, node_id=n, host=f"broker-{n}.internal", port=9092)
        for n in (1, 2, 3)
    )
    parts = tuple(
        build(
            m.MetadataResponsePartition,
            error_code=0,
            partition_index=p,
            leader_id=1,
            leader_epoch=0,
            replica_nodes=(1, 2),
            isr_nodes=(1, 2),
            offline_replicas=(),
        )
        for p in range(partitions)
    )
    top = tuple(
        build(
            m.MetadataResponseTopic,
            error_code=0,
            name=f"topic-{i}",
            topic_id=uuid.uuid4(),
            is_internal=False,
            partitions=parts,
            topic_authorized_operations=-2147483648,
        )
        for i in range(topics)
    )
    return build(
        m.MetadataResponse,
        throttle_time=0,
        brokers=brokers,
        cluster_id="c",
        controller_id=1,
        topics=top,
        cluster_authorized_operations=-2147483648,
        error_code=0,
    )


def single_broker_metadata(version: int, port: int) -> bytes:
    """A fake broker's encoded Metadata answer: itself as node 1 on 127.0.0.1:port, no topics."""
    m = importlib.import_module(response_class(3, version).__module__)
    broker = build(m.MetadataResponseBroker, node_id=1, host="127.0.0.1", port=port)
    return encode(
        build(
            m.MetadataResponse,
            throttle_time=0,
            brokers=(broker,),
            cluster_id="fake",
            controller_id=1,
            topics=(),
            error_code=0,
            cluster_authorized_operations=0,
        )
    )
