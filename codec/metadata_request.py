"""Metadata (key 3) requests: which topics are asked for, and whether they may be auto-created."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from kafka_policy_proxy.codec.errors import CodecError
from kafka_policy_proxy.codec.prescan import decode_untrusted
from kafka_policy_proxy.codec.registry import request_class

METADATA = 3
# v0-3 have no flag: the broker auto-creates whenever auto.create.topics.enable is set.
AUTO_CREATE_FLAG_VERSION = 4


@dataclass(frozen=True, slots=True)
class MetadataTopics:
    """The topics a Metadata request names; `names` is None when it asks for all topics."""

    names: tuple[str, ...] | None
    topic_ids: tuple[UUID, ...]
    allow_auto_topic_creation: bool


def decode_metadata_request(api_version: int, body: bytes) -> Any:
    """Decode a Metadata request body of this version; raises CodecError."""
    # librdkafka 2.x sends bytes after the last field of a v13 request, which the broker (it
    # reads fields in order) ignores; so does the proxy, or librdkafka could not connect.
    return decode_untrusted(request_class(METADATA, api_version), body, trailing_ok=True)


def metadata_topics(request: Any) -> MetadataTopics:
    """The requested names and ids, and the effective auto-creation flag."""
    version = int(request.__version__)
    topics = request.topics
    # v0 has no null array: an empty one means every topic.
    if topics is None or (version == 0 and not topics):
        return MetadataTopics(None, (), False)
    names = tuple(t.name for t in topics if t.name is not None)
    ids = tuple(t.topic_id for t in topics if getattr(t, "topic_id", None) is not None)
    auto_create = (
        bool(request.allow_auto_topic_creation) if version >= AUTO_CREATE_FLAG_VERSION else True
    )
    return MetadataTopics(names, ids, auto_create)


def without_auto_create(request: Any) -> Any:
    """The same request with auto-creation off; v0-3 cannot express that, so CodecError."""
    version = int(request.__version__)
    if version < AUTO_CREATE_FLAG_VERSION:
        raise CodecError(METADATA, version, "auto topic creation cannot be turned off before v4")
    if not request.allow_auto_topic_creation:
        return request
    return dataclasses.replace(request, allow_auto_topic_creation=False)
