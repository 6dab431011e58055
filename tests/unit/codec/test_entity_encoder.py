"""The generated entity encoder writes kio's bytes, for every entity of every guarded API."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from kafka_policy_proxy.codec.entity_encoder import encode_entity
from kafka_policy_proxy.codec.guarded import GUARDED_API_KEYS, guarded_api
from kafka_policy_proxy.codec.guarded.base import element_class
from kafka_policy_proxy.codec.kio_introspect import EntityField, EntityTupleField, classify_field
from kafka_policy_proxy.codec.registry import encode, request_class, response_class
from tests.unit.codec.kio_strategies import entities


def _classes() -> list[Any]:
    """Every entity class (messages, entries, results and what they nest) of every version."""
    found: dict[type[Any], None] = {}

    def walk(cls: type[Any]) -> None:
        if cls in found:
            return
        found[cls] = None
        for field in dataclasses.fields(cls):
            kind = classify_field(field)
            if isinstance(kind, EntityTupleField | EntityField):
                walk(kind.type_)

    for key in sorted(GUARDED_API_KEYS):
        api = guarded_api(key)
        assert api is not None
        for version in api.versions():
            walk(request_class(key, version))
            walk(response_class(key, version))
    return [
        pytest.param(cls, id=f"{cls.__module__.split('.')[-3]}.{cls.__name__}") for cls in found
    ]


@pytest.mark.parametrize("cls", _classes())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_bytes_are_kios(cls: type[Any], data: Any) -> None:
    entity = data.draw(entities(cls))
    assert encode_entity(entity) == encode(entity)


def test_a_tagged_field_kio_writes_is_written_by_kio() -> None:
    cls = element_class(response_class(19, 7), "topics")
    result = cls(
        name="t",
        topic_id=uuid.uuid4(),
        error_code=ErrorCode.none,
        error_message=None,
        topic_config_error_code=ErrorCode.policy_violation,
        num_partitions=3,
        replication_factor=3,
        configs=(),
    )
    assert encode_entity(result) == encode(result)
    assert encode_entity(dataclasses.replace(result, topic_config_error_code=ErrorCode.none)) == (
        encode(dataclasses.replace(result, topic_config_error_code=ErrorCode.none))
    )


def test_what_kio_cannot_encode_raises_kios_error() -> None:
    cls = element_class(response_class(19, 2), "topics")
    for name in ("x" * 40_000, None):
        entity = cls(name=name, error_code=ErrorCode.none, error_message=None)
        with pytest.raises(Exception) as raised:
            encode(entity)
        with pytest.raises(raised.type):
            encode_entity(entity)


def test_every_result_class_has_generated_code() -> None:
    """None of them falls back to kio as a class (only an entity with tagged fields set)."""
    from kafka_policy_proxy.codec import entity_encoder

    for key in GUARDED_API_KEYS:
        api = guarded_api(key)
        assert api is not None
        for version in api.versions():
            cls = element_class(response_class(key, version), api.results_field)
            assert entity_encoder._compile(cls) is not None, cls
