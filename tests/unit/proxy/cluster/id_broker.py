"""A fake broker's script that answers Metadata per topic id and counts what it was asked."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.response import MetadataResponseTopic

from kafka_policy_proxy.codec.header import peek_request_header, request_body_offset
from kafka_policy_proxy.codec.registry import decode_exact, encode, request_class
from tests.unit.proxy.cluster.fake_broker import TOPIC_ID, FakeBroker, describe, metadata

METADATA, DESCRIBE_CONFIGS = 3, 32


@dataclass
class IdBroker:
    """Knows topic 'orders' (TOPIC_ID) once `created`; every other id is unknown. Requests
    naming more than `hang_over` keys are never answered."""

    created: bool = True
    hang_over: int | None = None
    broker: FakeBroker | None = None
    asked: list[tuple[int, int]] = field(default_factory=list)  # (api key, keys named)
    metadata_seen: asyncio.Event = field(default_factory=asyncio.Event)

    def ids_asked(self) -> int:
        """Topic ids and names named in every Metadata request so far."""
        return sum(n for key, n in self.asked if key == METADATA)

    def metadata_requests(self) -> int:
        """Metadata requests so far."""
        return sum(1 for key, _ in self.asked if key == METADATA)

    def __call__(self, key: int) -> bytes | None:
        assert self.broker is not None
        frame = self.broker.frames[-1]
        request: Any = decode_exact(
            request_class(key, peek_request_header(frame).api_version),
            frame,
            request_body_offset(frame, peek_request_header(frame)),
        )
        named = request.topics if key == METADATA else request.resources
        self.asked.append((key, len(named or ())))
        if key == METADATA:
            self.metadata_seen.set()
        if self.hang_over is not None and len(named or ()) > self.hang_over:
            return None
        if key == DESCRIBE_CONFIGS:
            return encode(describe())
        known = metadata().topics[0]
        topics = tuple(
            known
            if self.created and (t.topic_id == TOPIC_ID or t.name == "orders")
            else _unknown(known, t.topic_id, t.name)
            for t in request.topics or ()
        )
        return encode(replace(metadata(), topics=topics))


def _unknown(known: Any, topic_id: uuid.UUID | None, name: str | None) -> MetadataResponseTopic:
    error = (
        ErrorCode.unknown_topic_id if topic_id is not None else ErrorCode.unknown_topic_or_partition
    )
    return replace(known, error_code=error, topic_id=topic_id, name=name, partitions=())
