"""Hypothesis strategies for any kio message class, every field included (tagged ones too)."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from kafka_policy_proxy.codec.kio_introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)

_INTS = {
    "int8": 8,
    "int16": 16,
    "int32": 32,
    "int64": 64,
}
_UINTS = {"uint8": 8, "uint16": 16, "uint32": 32, "uint64": 64}
# Kafka writes a null uuid as all zeros, so the zero uuid decodes as None.
_UUIDS = st.uuids().filter(lambda u: u.int != 0)
_TEXT = st.text(max_size=12)
_MAX_ARRAY = 3


def _primitive(kafka_type: str) -> st.SearchStrategy[Any]:
    if kafka_type in _INTS:
        bits = _INTS[kafka_type]
        return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    if kafka_type in _UINTS:
        return st.integers(0, 2 ** _UINTS[kafka_type] - 1)
    if kafka_type == "bool":
        return st.booleans()
    if kafka_type == "string":
        return _TEXT
    if kafka_type in ("bytes", "records"):
        return st.binary(max_size=12)
    if kafka_type == "uuid":
        return _UUIDS
    if kafka_type == "error_code":
        return st.sampled_from(ErrorCode)
    if kafka_type == "timedelta_i32":
        return st.integers(-(2**31), 2**31 - 1).map(lambda ms: datetime.timedelta(milliseconds=ms))
    if kafka_type == "float64":
        return st.floats(allow_nan=False, allow_infinity=False)
    raise NotImplementedError(kafka_type)


def _field(field: dataclasses.Field[Any]) -> st.SearchStrategy[Any]:
    kind = classify_field(field)
    # Tagged fields cannot carry null on the wire: kio treats them as non-optional.
    nullable = get_field_tag(field) is None and is_optional(field)
    strategy: st.SearchStrategy[Any]
    if isinstance(kind, EntityTupleField):
        strategy = st.lists(entities(kind.type_), max_size=_MAX_ARRAY).map(tuple)
    elif isinstance(kind, EntityField):
        strategy = entities(kind.type_)
    elif isinstance(kind, PrimitiveTupleField):
        element = _primitive(field.metadata["kafka_type"])
        strategy = st.lists(element, max_size=_MAX_ARRAY).map(tuple)
    else:
        strategy = _primitive(field.metadata["kafka_type"])
    if field.metadata.get("kafka_type") == "uuid" and not kind.is_array:
        nullable = True
    return st.none() | strategy if nullable else strategy


def entities(cls: type[Any]) -> st.SearchStrategy[Any]:
    """Instances of a kio entity class with every field drawn."""
    return st.deferred(
        lambda: st.builds(cls, **{f.name: _field(f) for f in dataclasses.fields(cls)})
    )
