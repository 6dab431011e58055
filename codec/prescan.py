"""Structural pre-scan of untrusted bodies before kio decodes them.

kio's native reader pre-allocates arrays from the declared element count. A compact array
of strings claiming 2**35 elements aborts the whole process (a Rust allocation failure,
not a Python exception), so a 5-byte frame could kill the proxy. This walk checks every
length and count against the bytes actually left, so kio only ever sees frames whose
declared sizes fit inside them.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from typing import Any

from kafka_policy_proxy.codec.errors import CodecError
from kafka_policy_proxy.codec.kio_introspect import (
    FIXED_SIZES,
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)
from kafka_policy_proxy.codec.registry import decode_exact

# (data, position, end, budget) -> new position; raises _Malformed, or _TooMany once the
# array elements walked exceed the budget (budget[0]: how many may still be walked).
_Budget = list[int]
_Step = Callable[[bytes, int, int, _Budget], int]

_VARINT_MAX_BYTES = 5
_UNLIMITED = 2**62  # check_structure's budget: the bytes left bound each array already
_SIGNED = {1: struct.Struct(">b"), 2: struct.Struct(">h"), 4: struct.Struct(">i")}


class _Malformed(Exception):
    """Internal: the frame does not fit its schema; converted to CodecError at the edge."""


class _TooMany(Exception):
    """Internal: the frame declares more array elements than the walk's budget."""


def _uvarint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    value = 0
    shift = 0
    for i in range(_VARINT_MAX_BYTES):
        if pos + i >= end:
            raise _Malformed("truncated varint")
        byte = data[pos + i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos + i + 1
        shift += 7
    raise _Malformed("varint longer than 5 bytes")


def _length(data: bytes, pos: int, end: int, flexible: bool, width: int) -> tuple[int, int]:
    """A length or count: compact (uvarint of n + 1) or a signed int of `width` bytes."""
    if flexible:
        # Almost every compact length fits in one byte: skip the general varint loop.
        if pos < end and data[pos] < 0x80:
            return data[pos] - 1, pos + 1
        raw, pos = _uvarint(data, pos, end)
        return raw - 1, pos
    if pos + width > end:
        raise _Malformed("truncated")
    return _SIGNED[width].unpack_from(data, pos)[0], pos + width


def _fixed(size: int) -> _Step:
    def step(data: bytes, pos: int, end: int, budget: _Budget) -> int:
        if pos + size > end:
            raise _Malformed("truncated")
        return pos + size

    return step


def _length_prefixed(flexible: bool, nullable: bool, width: int) -> _Step:
    """Strings (int16 length) and bytes (int32 length), or their compact forms."""

    def step(data: bytes, pos: int, end: int, budget: _Budget) -> int:
        length, pos = _length(data, pos, end, flexible, width)
        if length < 0:
            if length == -1 and nullable:
                return pos
            raise _Malformed("unexpected null or negative length")
        if pos + length > end:
            raise _Malformed(f"length {length} exceeds the {end - pos} bytes left")
        return pos + length

    return step


def _array(flexible: bool, nullable: bool, element: _Step, element_size: int | None) -> _Step:
    def step(data: bytes, pos: int, end: int, budget: _Budget) -> int:
        count, pos = _length(data, pos, end, flexible, 4)
        if count < 0:
            if count == -1 and nullable:
                return pos
            raise _Malformed("unexpected null or negative array length")
        # Every element takes at least one byte: this bounds what kio will allocate.
        if count > end - pos:
            raise _Malformed(f"array of {count} elements exceeds the {end - pos} bytes left")
        budget[0] -= count
        if budget[0] < 0:
            raise _TooMany
        if element_size is not None:
            if pos + count * element_size > end:
                raise _Malformed("truncated")
            return pos + count * element_size
        for _ in range(count):
            pos = element(data, pos, end, budget)
        return pos

    return step


def _primitive(kafka_type: str, flexible: bool, nullable: bool) -> _Step:
    size = FIXED_SIZES.get(kafka_type)
    if size is not None:
        return _fixed(size)
    if kafka_type == "string":
        return _length_prefixed(flexible, nullable, 2)
    if kafka_type in ("bytes", "records"):
        return _length_prefixed(flexible, nullable, 4)
    raise TypeError(f"no pre-scan rule for kafka type {kafka_type!r}")


def _nullable_entity(inner: _Step) -> _Step:
    def step(data: bytes, pos: int, end: int, budget: _Budget) -> int:
        marker, pos = _length(data, pos, end, False, 1)
        if marker == -1:
            return pos
        if marker != 1:
            raise _Malformed(f"bad nullable struct marker {marker}")
        return inner(data, pos, end, budget)

    return step


def _field_step(field: dataclasses.Field[Any], flexible: bool, is_tag: bool) -> _Step:
    kind = classify_field(field)
    nullable = not is_tag and is_optional(field)
    if isinstance(kind, EntityTupleField):
        return _array(flexible, nullable, _entity_step(kind.type_), None)
    if isinstance(kind, EntityField):
        inner = _entity_step(kind.type_)
        return _nullable_entity(inner) if nullable else inner
    kafka_type = str(field.metadata["kafka_type"])
    if isinstance(kind, PrimitiveTupleField):
        element = _primitive(kafka_type, flexible, False)
        return _array(flexible, nullable, element, FIXED_SIZES.get(kafka_type))
    return _primitive(kafka_type, flexible, nullable)


_entity_steps: dict[type[Any], _Step] = {}


def _entity_step(cls: type[Any]) -> _Step:
    step = _entity_steps.get(cls)
    if step is None:
        step = _entity_steps[cls] = _compile_entity(cls)
    return step


def _compile_entity(cls: type[Any]) -> _Step:
    flexible = bool(cls.__flexible__)
    steps: list[_Step] = []
    tagged: dict[int, _Step] = {}
    fixed_run = 0
    for field in dataclasses.fields(cls):
        tag = get_field_tag(field)
        if tag is not None:
            tagged[int(tag)] = _field_step(field, flexible, is_tag=True)
            continue
        size = FIXED_SIZES.get(field.metadata.get("kafka_type", ""))
        if size is not None and not classify_field(field).is_array:
            # Consecutive fixed-size fields need one bounds check between them.
            fixed_run += size
            continue
        if fixed_run:
            steps.append(_fixed(fixed_run))
            fixed_run = 0
        steps.append(_field_step(field, flexible, is_tag=False))
    if fixed_run:
        steps.append(_fixed(fixed_run))

    def step(data: bytes, pos: int, end: int, budget: _Budget) -> int:
        for field_step in steps:
            pos = field_step(data, pos, end, budget)
        if not flexible:
            return pos
        if pos < end and data[pos] == 0:
            return pos + 1  # no tagged fields, the usual case
        count, pos = _uvarint(data, pos, end)
        for _ in range(count):
            tag, pos = _uvarint(data, pos, end)
            size, pos = _uvarint(data, pos, end)
            if pos + size > end:
                raise _Malformed(f"tagged field {tag} of {size} bytes exceeds the frame")
            tag_step = tagged.get(tag)
            if tag_step is None:
                raise _Malformed(f"unknown tagged field {tag}")
            if tag_step(data, pos, pos + size, budget) != pos + size:
                raise _Malformed(f"tagged field {tag} does not fill its {size} bytes")
            pos += size
        return pos

    return step


def check_structure(
    cls: type[Any], data: bytes, offset: int = 0, *, trailing_ok: bool = False
) -> int:
    """Raise CodecError unless data[offset:] is one valid `cls` message; return where it ends.

    Trailing bytes are an error unless `trailing_ok`.
    """
    key, version = int(cls.__api_key__), int(cls.__version__)
    try:
        end = _entity_step(cls)(data, offset, len(data), [_UNLIMITED])
    except _Malformed as exc:
        raise CodecError(key, version, str(exc)) from None
    if end != len(data) and not trailing_ok:
        raise CodecError(key, version, f"{len(data) - end} trailing bytes after the message")
    return end


def count_elements(cls: type[Any], data: bytes, offset: int, limit: int) -> int | None:
    """Every array element in data[offset:] (a `cls` message), nested ones included.

    None once more than `limit` are declared: the walk stops there, so its cost is bounded by
    `limit`, not by the frame. Raises CodecError for a frame malformed before that point.
    """
    budget = [limit]
    try:
        _entity_step(cls)(data, offset, len(data), budget)
    except _TooMany:
        return None
    except _Malformed as exc:
        raise CodecError(int(cls.__api_key__), int(cls.__version__), str(exc)) from None
    return limit - budget[0]


def decode_untrusted(
    cls: type[Any], data: bytes, offset: int = 0, *, trailing_ok: bool = False
) -> Any:
    """Decode bytes from a peer: pre-scan, then kio, with every failure as CodecError."""
    data = bytes(data)
    end = check_structure(cls, data, offset, trailing_ok=trailing_ok)
    data = data[:end]
    try:
        return decode_exact(cls, data, offset)
    except CodecError:
        raise
    except Exception as exc:
        # The native reader's error types are undocumented (an unknown tag is a KeyError);
        # whatever it raises on hostile input must surface as the codec's own error.
        raise CodecError(
            int(cls.__api_key__), int(cls.__version__), f"{type(exc).__name__}: {exc}"
        ) from exc
