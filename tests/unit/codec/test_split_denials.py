"""Split with a per-entry error code: unknown topic ids, and the resolved name of an id."""

from __future__ import annotations

import dataclasses
import importlib
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from harness.messages import build
from kafka_policy_proxy.codec.guarded import Denial, guarded_api
from kafka_policy_proxy.codec.registry import decode_exact, request_class, response_class
from kafka_policy_proxy.codec.violations import has_error_message
from tests.unit.codec.guarded_cases import CASES

KNOWN = uuid.UUID("0f6c9a1e-3b0a-4a8e-9d51-2f9f7e3c1a01")
UNKNOWN = uuid.UUID("9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d")


def delete_topics(version: int, *entries: Any) -> Any:
    m = importlib.import_module(request_class(20, version).__module__)
    if version < 6:
        return build(m.DeleteTopicsRequest, topic_names=entries, timeout=1)
    topics = tuple(build(m.DeleteTopicState, name=n, topic_id=i) for n, i in entries)
    return build(m.DeleteTopicsRequest, topics=topics, timeout=1)


def answered(version: int, request: Any, denied: dict[int, str | Denial]) -> list[Any]:
    api = guarded_api(20)
    assert api is not None
    plan = api.split(request, denied)
    assert plan.forward is None
    response: Any = decode_exact(response_class(20, version), api.merge(plan, None))
    return list(response.responses)


def test_an_unknown_id_is_answered_with_its_own_code_and_message() -> None:
    request = delete_topics(6, (None, UNKNOWN))
    denial = Denial("topic id names no known topic", ErrorCode.unknown_topic_id)
    [result] = answered(6, request, {0: denial})
    assert (result.name, result.topic_id) == (None, UNKNOWN)
    assert result.error_code is ErrorCode.unknown_topic_id
    assert result.error_message == "topic id names no known topic"


def test_a_denied_id_is_answered_with_the_name_it_resolved_to() -> None:
    request = delete_topics(6, (None, KNOWN))
    [result] = answered(6, request, {0: Denial("protected topic", name="protected.orders")})
    assert (result.name, result.topic_id) == ("protected.orders", KNOWN)
    assert result.error_code is ErrorCode.policy_violation
    assert result.error_message == "protected topic"


def test_a_plain_message_is_still_a_policy_violation() -> None:
    [result] = answered(6, delete_topics(6, ("orders", None)), {0: "no"})
    assert (result.name, result.error_code, result.error_message) == (
        "orders",
        ErrorCode.policy_violation,
        "no",
    )


def test_a_version_without_messages_keeps_the_code_and_drops_the_message() -> None:
    request = delete_topics(4, "orders")
    [result] = answered(4, request, {0: Denial("gone", ErrorCode.unknown_topic_or_partition)})
    assert (result.name, result.error_code) == ("orders", ErrorCode.unknown_topic_or_partition)
    assert not hasattr(result, "error_message")


# A long reason, then the decision id: the codec passes it on whole, in every version with a
# message field, so the id the filter put last is never cut.
CITED = "[rule] " + "x" * 4000 + " (decision 01a2250d-eadb-7423-9209-069dabfc4ec4)"


def _with_errors(entity: Any) -> list[Any]:
    """Every entity of a decoded response that carries an error code."""
    found = [entity] if "error_code" in {f.name for f in dataclasses.fields(entity)} else []
    for field in dataclasses.fields(entity):
        value = getattr(entity, field.name)
        for item in value if isinstance(value, tuple) else ():
            if dataclasses.is_dataclass(item):
                found += _with_errors(item)
    return found


@pytest.mark.parametrize(
    ("key", "version"),
    [(k, v) for k in sorted(CASES) for v in guarded_api(k).versions()],  # type: ignore[union-attr]
)
def test_a_cited_message_reaches_every_version_that_has_a_message_field(
    key: int, version: int
) -> None:
    api = guarded_api(key)
    assert api is not None
    plan = api.split(CASES[key].request(version, ["a", "b"]), {0: CITED, 1: CITED})
    assert plan.forward is None
    response = decode_exact(response_class(key, version), api.merge(plan, None))
    entries = [e for e in _with_errors(response) if e is not response]
    assert entries
    for entry in entries:
        if has_error_message(type(entry)):
            assert (entry.error_code, entry.error_message) == (ErrorCode.policy_violation, CITED)
        else:  # DeleteTopics v1-4 and DeleteRecords: the id is in the record only
            assert not (key == 20 and version >= 5)
