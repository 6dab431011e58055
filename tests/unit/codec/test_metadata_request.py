"""Metadata requests: requested topics, the auto-creation flag, and turning it off."""

from __future__ import annotations

import uuid

import pytest

from harness.messages import build
from kafka_policy_proxy.codec.errors import CodecError
from kafka_policy_proxy.codec.guarded.base import element_class
from kafka_policy_proxy.codec.metadata_request import (
    MetadataTopics,
    decode_metadata_request,
    metadata_topics,
    without_auto_create,
)
from kafka_policy_proxy.codec.registry import encode, request_class


def _request(
    version: int, names: list[str] | None, auto: bool = True, ids: tuple[uuid.UUID, ...] = ()
) -> object:
    cls = request_class(3, version)
    topic_cls = element_class(cls, "topics")
    topics = None
    if names is not None:
        topics = tuple(build(topic_cls, name=n, topic_id=None) for n in names)
        topics += tuple(build(topic_cls, name=None, topic_id=i) for i in ids)
    fields = {
        "topics": topics,
        "allow_auto_topic_creation": auto,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False,
    }
    return decode_metadata_request(version, encode(build(cls, **fields)))


@pytest.mark.parametrize("version", range(4, 14))
def test_flag_and_names_from_v4(version: int) -> None:
    request = _request(version, ["a", "b"], auto=True)
    assert metadata_topics(request) == MetadataTopics(("a", "b"), (), True)
    off = without_auto_create(request)
    assert metadata_topics(off) == MetadataTopics(("a", "b"), (), False)
    assert off == _request(version, ["a", "b"], auto=False)


@pytest.mark.parametrize("version", range(1, 4))
def test_before_v4_auto_creation_is_implicit_and_cannot_be_turned_off(version: int) -> None:
    request = _request(version, ["a"])
    assert metadata_topics(request).allow_auto_topic_creation is True
    with pytest.raises(CodecError, match="before v4") as caught:
        without_auto_create(request)
    assert (caught.value.api_key, caught.value.api_version) == (3, version)


def test_all_topics_never_auto_creates() -> None:
    assert metadata_topics(_request(12, None)) == MetadataTopics(None, (), False)
    assert metadata_topics(_request(0, [])) == MetadataTopics(None, (), False)


def test_topic_ids_from_v10() -> None:
    topic_id = uuid.uuid4()
    request = _request(12, ["a"], ids=(topic_id,))
    assert metadata_topics(request) == MetadataTopics(("a",), (topic_id,), True)


def test_librdkafka_v13_body_with_trailing_bytes_reads_as_the_broker_reads_it() -> None:
    # Captured from confluent-kafka 2.16.1 list_topics(): three bytes follow the v13 fields.
    request = decode_metadata_request(13, bytes.fromhex("00000000010000"))
    assert request.topics is None
    assert request.allow_auto_topic_creation is False
    assert request.include_topic_authorized_operations is False
