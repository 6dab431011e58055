"""A scripted fake broker for the cluster-state reader, and the answers it gives."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from kio.schema.describe_configs.v4.response import (
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
)
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.response import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32

from kafka_policy_proxy.codec.header import peek_request_header, response_header
from kafka_policy_proxy.codec.registry import encode

TOPIC_ID = uuid.UUID("6b1b8f0e-6a4e-4d6b-9a59-0d1f2f9b7c11")


def metadata(topic_error: ErrorCode = ErrorCode.none) -> MetadataResponse:
    """One broker (id 1) and one topic 'orders' with one partition on it."""
    partition = MetadataResponsePartition(
        error_code=ErrorCode.none,
        partition_index=i32(0),
        leader_id=BrokerId(1),
        leader_epoch=i32(0),
        replica_nodes=(BrokerId(1),),
        isr_nodes=(BrokerId(1),),
        offline_replicas=(),
    )
    topic = MetadataResponseTopic(
        error_code=topic_error,
        name=TopicName("orders"),
        topic_id=TOPIC_ID,
        is_internal=False,
        partitions=(partition,) if topic_error is ErrorCode.none else (),
        topic_authorized_operations=i32(-(2**31)),
    )
    return MetadataResponse(
        throttle_time=timedelta(0),
        brokers=(MetadataResponseBroker(node_id=BrokerId(1), host="h", port=i32(1), rack=None),),
        cluster_id="c",
        controller_id=BrokerId(1),
        topics=(topic,),
    )


def describe(error: ErrorCode = ErrorCode.none) -> DescribeConfigsResponse:
    """The configs of topic 'orders' (or an error for it)."""
    config = DescribeConfigsResourceResult(
        name="retention.ms",
        value="1000",
        read_only=False,
        config_source=i8(1),
        is_sensitive=False,
        synonyms=(),
        config_type=i8(5),
        documentation=None,
    )
    result = DescribeConfigsResult(
        error_code=error,
        error_message=None if error is ErrorCode.none else "not allowed",
        resource_type=i8(2),
        resource_name="orders",
        configs=(config,) if error is ErrorCode.none else (),
    )
    return DescribeConfigsResponse(throttle_time=timedelta(0), results=(result,))


Script = Callable[[int], bytes | None]


class FakeBroker:
    """Answers each request with what `script(api_key)` returns: an encoded body, or nothing."""

    def __init__(self, script: Script, *, close_after: int | None = None) -> None:
        self.script = script
        self.close_after = close_after  # close each connection after this many answers
        self.requests: list[int] = []
        self.frames: list[bytes] = []  # every request, for scripts that read them
        self.connections = 0
        self.server: asyncio.Server | None = None

    @property
    def address(self) -> tuple[str, int]:
        assert self.server is not None
        return ("127.0.0.1", self.server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        answered = 0
        try:
            while self.close_after is None or answered < self.close_after:
                size = int.from_bytes(await reader.readexactly(4))
                frame = await reader.readexactly(size)
                header = peek_request_header(frame)
                self.requests.append(header.api_key)
                self.frames.append(frame)
                body = self.script(header.api_key)
                if body is None:
                    await asyncio.sleep(3600)  # never answers
                    continue
                head = response_header(header.correlation_id, header.api_key, header.api_version)
                writer.write(len(head + body).to_bytes(4, "big") + head + body)
                answered += 1
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()


def answers(metadata_response: Any = None, describe_response: Any = None) -> Script:
    """A script answering Metadata (3) and DescribeConfigs (32) with these responses."""
    bodies = {
        3: encode(metadata_response or metadata()),
        32: encode(describe_response or describe()),
    }
    return lambda key: bodies[key]
