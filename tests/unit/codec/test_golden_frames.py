"""Real frames from the Java AdminClient, confluent-kafka and kafka-python, and a Kafka 4.1 broker.

Captured by tests/data/capture_golden.py; each request is decoded and re-encoded to the same
bytes, each broker response decodes, and the broker's own answers to duplicate topics merge
back the way the broker meant them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kafka_policy_proxy.codec.guarded import guarded_api
from kafka_policy_proxy.codec.header import (
    peek_request_header,
    request_body_offset,
    response_header_size,
)
from kafka_policy_proxy.codec.metadata_request import (
    METADATA,
    decode_metadata_request,
    metadata_topics,
)
from kafka_policy_proxy.codec.registry import encode

GOLDEN = Path(__file__).resolve().parents[2] / "data" / "golden"
MANIFEST: list[dict[str, Any]] = json.loads((GOLDEN / "manifest.json").read_text())
INVALID_REQUEST = 42


def _request_body(entry: dict[str, Any]) -> bytes:
    frame = (GOLDEN / entry["request"]).read_bytes()
    header = peek_request_header(frame)
    assert (header.api_key, header.api_version) == (entry["api_key"], entry["api_version"])
    return frame[request_body_offset(frame, header) :]


def _response_body(entry: dict[str, Any]) -> bytes:
    frame = (GOLDEN / entry["response"]).read_bytes()
    return frame[response_header_size(frame, entry["api_key"], entry["api_version"]) :]


def _decode_request(entry: dict[str, Any]) -> Any:
    api = guarded_api(entry["api_key"])
    if api is None:
        return decode_metadata_request(entry["api_version"], _request_body(entry))
    return api.decode_request(entry["api_version"], _request_body(entry))


def _by_client(client: str) -> list[dict[str, Any]]:
    return [e for e in MANIFEST if e["client"] == client]


def test_every_client_sent_every_guarded_api_it_implements() -> None:
    sent = {(e["client"], e["api_key"]) for e in MANIFEST}
    expected = {
        # The Java AdminClient 4.1 has no legacy AlterConfigs any more.
        "java-adminclient": {19, 37, 44, 45, 21, 20, METADATA},
        # librdkafka has no AlterPartitionReassignments.
        "confluent-kafka": {19, 37, 33, 44, 21, 20, METADATA},
        "kafka-python": {19, 37, 33, 44, 45, 21, 20, METADATA},
    }
    for client, keys in expected.items():
        assert {key for c, key in sent if c == client} == keys, client


@pytest.mark.parametrize("entry", MANIFEST, ids=[e["request"] for e in MANIFEST])
def test_request_decodes_and_re_encodes_to_the_same_bytes(entry: dict[str, Any]) -> None:
    body = _request_body(entry)
    assert encode(_decode_request(entry)) == body


WITH_RESPONSE = [e for e in MANIFEST if "response" in e and e["api_key"] != METADATA]


@pytest.mark.parametrize("entry", WITH_RESPONSE, ids=[e["response"] for e in WITH_RESPONSE])
def test_broker_response_decodes_and_re_encodes_to_the_same_bytes(entry: dict[str, Any]) -> None:
    api = guarded_api(entry["api_key"])
    assert api is not None
    body = _response_body(entry)
    assert encode(api.decode_response(entry["api_version"], body)) == body


def test_delete_topics_by_id_from_the_java_client() -> None:
    by_id = [
        item
        for entry in _by_client("java-adminclient")
        if entry["api_key"] == 20
        for item in guarded_api(20).topic_items(_decode_request(entry))  # type: ignore[union-attr]
        if item.topic is None
    ]
    assert len(by_id) == 1
    assert by_id[0].topic_id is not None


def test_incremental_alter_configs_from_java_mixes_topic_and_broker_resources() -> None:
    api = guarded_api(44)
    assert api is not None
    (validate_only,) = [
        request
        for entry in _by_client("java-adminclient")
        if entry["api_key"] == 44 and (request := _decode_request(entry)).validate_only
    ]
    assert {item.topic for item in api.topic_items(validate_only)} == {"java-plain", "java-configs"}
    plan = api.split(validate_only, {item.index: "no" for item in api.topic_items(validate_only)})
    assert plan.forward is not None
    assert [(r.resource_type, r.resource_name) for r in plan.forward.resources] == [(4, "")]
    assert plan.forward.validate_only is True


def test_producers_ask_for_auto_creation() -> None:
    for client in ("confluent-kafka", "kafka-python"):
        flags = {
            metadata_topics(_decode_request(e)).allow_auto_topic_creation
            for e in _by_client(client)
            if e["api_key"] == METADATA
        }
        assert True in flags, client


def _broker_duplicates(key: int, version: int) -> list[tuple[Any, Any]]:
    api = guarded_api(key)
    assert api is not None
    return [
        (_decode_request(e), api.decode_response(version, _response_body(e)))
        for e in _by_client("broker-duplicates")
        if (e["api_key"], e["api_version"]) == (key, version) and "response" in e
    ]


def _merge_untouched(key: int, request: Any, response: Any) -> Any:
    """What the proxy sends back when nothing is denied: the broker's answer, in request order."""
    api = guarded_api(key)
    assert api is not None
    plan = api.split(request, {})
    assert plan.forward is request
    return api.decode_response(int(request.__version__), api.merge(plan, response))


def test_real_broker_create_topics_duplicate_is_answered_once_and_kept_in_request_order() -> None:
    (request, response), _ = _broker_duplicates(19, 7)
    assert [t.name for t in request.topics] == ["dup-a", "dup-b", "dup-a"]
    # Kafka appends the duplicate's single INVALID_REQUEST after the created topics.
    assert [(t.name, t.error_code) for t in response.topics] == [
        ("dup-b", 0),
        ("dup-a", INVALID_REQUEST),
    ]
    merged = _merge_untouched(19, request, response)
    assert [(t.name, t.error_code) for t in merged.topics] == [
        ("dup-a", INVALID_REQUEST),
        ("dup-b", 0),
    ]


def test_real_broker_incremental_alter_configs_answers_every_copy() -> None:
    ((request, response),) = _broker_duplicates(44, 1)
    expected = [("dup-b", INVALID_REQUEST), ("dup-c", 0), ("dup-b", INVALID_REQUEST)]
    assert [(r.resource_name, r.error_code) for r in response.responses] == expected
    merged = _merge_untouched(44, request, response)
    assert [(r.resource_name, r.error_code) for r in merged.responses] == expected


def test_real_broker_reassignments_answer_every_copy() -> None:
    ((request, response),) = _broker_duplicates(45, 0)
    assert [t.name for t in response.responses] == ["dup-b", "dup-b"]
    merged = _merge_untouched(45, request, response)
    assert [t.name for t in merged.responses] == ["dup-b", "dup-b"]


def test_real_broker_delete_topics_duplicates() -> None:
    ((request, response),) = _broker_duplicates(20, 4)
    assert request.topic_names == ("dup-c", "dup-c", "dup-a")
    merged = _merge_untouched(20, request, response)
    # One INVALID_REQUEST for the repeated name; dup-a never existed.
    assert [(r.name, r.error_code) for r in merged.responses] == [
        ("dup-c", INVALID_REQUEST),
        ("dup-a", 3),
    ]


def test_real_alter_configs_duplicate_gets_the_brokers_verdict_from_the_codec() -> None:
    """The broker never answered this frame (see codec/guarded/base.py); the codec does."""
    (entry,) = [e for e in _by_client("broker-duplicates") if e["api_key"] == 33]
    assert "response" not in entry
    request = _decode_request(entry)
    plan = guarded_api(33).split(request, {})  # type: ignore[union-attr]
    assert [r.resource_name for r in plan.forward.resources] == ["dup-c"]
    assert sorted(plan.refused) == [0, 2]


def test_real_broker_delete_records_answers_a_repeated_topic_once() -> None:
    ((request, response),) = _broker_duplicates(21, 2)
    assert [t.name for t in request.topics] == ["dup-b", "dup-b"]
    merged = _merge_untouched(21, request, response)
    (topic,) = merged.topics
    assert sorted(p.partition_index for p in topic.partitions) == [0, 1]


def test_real_broker_delete_topics_v6_answers_a_repeated_name_once() -> None:
    ((request, response),) = _broker_duplicates(20, 6)
    merged = _merge_untouched(20, request, response)
    assert [(r.name, r.error_code) for r in merged.responses] == [("dup-b", INVALID_REQUEST)]
