"""The soak's raw Kafka connections: pipelined requests whose answers are checked in order.

Every response's correlation id must be the oldest outstanding request's; a mismatch is a
misordered response, the failure the proxy must never produce (responses go back in request
order whatever the broker and the policy do).
"""

from __future__ import annotations

import asyncio
import importlib
import struct
from collections import deque
from typing import Any

from harness.messages import build, metadata_request
from kafka_policy_proxy.codec.header import request_header, response_header_size
from kafka_policy_proxy.codec.registry import decode_exact, encode, request_class, response_class


class Misordered(Exception):
    """A response came back for another request than the oldest outstanding one."""


class AsyncWire:
    """One connection: `send` pipelines, `receive` returns the oldest request's response."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self._next_id = 1
        self._sent: deque[tuple[int, int, int]] = deque()

    @classmethod
    async def open(cls, host: str, port: int, within: float = 10.0) -> AsyncWire:
        """Connect, within `within` seconds."""
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), within)
        return cls(reader, writer)

    @property
    def outstanding(self) -> int:
        """Requests sent and not yet answered."""
        return len(self._sent)

    async def send(self, message: Any) -> int:
        """Send a request without waiting for its answer; its correlation id."""
        key, version = int(message.__api_key__), int(message.__version__)
        correlation_id = self._next_id
        self._next_id += 1
        body = request_header(key, version, correlation_id, "soak") + encode(message)
        self.writer.write(struct.pack(">i", len(body)) + body)
        self._sent.append((correlation_id, key, version))
        await self.writer.drain()
        return correlation_id

    async def receive(self, chunk: int = 0, pause: float = 0.0) -> Any:
        """The oldest request's response; read `chunk` bytes at a time with `pause` between
        reads when given (a slow reader). Misordered if another request's answer comes."""
        expected, key, version = self._sent.popleft()
        (size,) = struct.unpack(">i", await self.reader.readexactly(4))
        if chunk:
            frame = bytearray()
            while len(frame) < size:
                frame += await self.reader.readexactly(min(chunk, size - len(frame)))
                await asyncio.sleep(pause)
        else:
            frame = bytearray(await self.reader.readexactly(size))
        (got,) = struct.unpack_from(">i", frame)
        if got != expected:
            raise Misordered(f"expected correlation id {expected}, got {got}")
        start = response_header_size(bytes(frame), key, version)
        return decode_exact(response_class(key, version), bytes(frame), start)

    def close(self) -> None:
        """Close the socket."""
        self.writer.close()


def _module(key: int, version: int) -> Any:
    return importlib.import_module(request_class(key, version).__module__)


def api_versions() -> Any:
    """ApiVersions v3."""
    return build(request_class(18, 3), client_software_name="soak", client_software_version="1")


def metadata(names: tuple[str, ...] | None = None) -> Any:
    """Metadata v12 for these topics, or all (no auto-creation)."""
    return metadata_request(names)


def create_topics(specs: list[tuple[str, dict[str, str]]]) -> Any:
    """CreateTopics v7: each topic with 3 partitions, replication factor 3 and its configs."""
    module = _module(19, 7)
    topics = tuple(
        build(
            module.CreatableTopic,
            name=name,
            num_partitions=3,
            replication_factor=3,
            assignments=(),
            configs=tuple(
                build(module.CreatableTopicConfig, name=k, value=v) for k, v in configs.items()
            ),
        )
        for name, configs in specs
    )
    return build(request_class(19, 7), topics=topics, timeout=30_000, validate_only=False)


def set_config(topic: str, key: str, value: str) -> Any:
    """IncrementalAlterConfigs v1: SET one config of one topic."""
    module = _module(44, 1)
    config = build(module.AlterableConfig, name=key, config_operation=0, value=value)
    resource = build(
        module.AlterConfigsResource, resource_type=2, resource_name=topic, configs=(config,)
    )
    return build(request_class(44, 1), resources=(resource,), validate_only=False)


def delete_records(topics: list[str]) -> Any:
    """DeleteRecords v2: partition 0 of each topic, before offset 0 (changes nothing)."""
    module = _module(21, 2)
    entries = tuple(
        build(
            module.DeleteRecordsTopic,
            name=name,
            partitions=(build(module.DeleteRecordsPartition, partition_index=0, offset=0),),
        )
        for name in topics
    )
    return build(request_class(21, 2), topics=entries, timeout=30_000)


def delete_topics(names: list[str]) -> Any:
    """DeleteTopics v6 by name."""
    module = _module(20, 6)
    topics = tuple(build(module.DeleteTopicState, name=name, topic_id=None) for name in names)
    return build(request_class(20, 6), topics=topics, timeout=30_000)
