"""kio's encoding of one entity (a result, an entry), generated once per class as straight-line
Python.

A split answer's synthetic results (500 for a 1,000-topic batch half denied) are encoded one
by one; kio's writer costs about 16 µs each (a buffer, a call and a range check per field),
this about a fifth of that. The bytes are kio's own, which tests/unit/codec/test_entity_encoder.py
holds it to for every entity class of every guarded API version. Whatever it does not
generate code for (a kind of field the guarded APIs lack), or an entity whose tagged fields
are not all at the value kio leaves out, is encoded by kio itself.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from typing import Any

from kafka_policy_proxy.codec.kio_introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_tagged_field_default,
    is_optional,
)
from kafka_policy_proxy.codec.registry import encode

_FORMATS = {
    "bool": "?",
    "int8": "b",
    "int16": "h",
    "int32": "i",
    "int64": "q",
    "uint8": "B",
    "uint16": "H",
    "uint32": "I",
    "uint64": "Q",
    "float64": "d",
}
_ZERO_UUID = bytes(16)


class _KioOnly(Exception):
    """Internal: this value is encoded by kio (a tagged field to write)."""


def _uvarint(value: int) -> bytes:
    if value < 0x80:
        return _SMALL[value]
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL = [bytes((n,)) for n in range(0x80)]


def _kio_only() -> None:
    raise _KioOnly


_NAMESPACE: dict[str, Any] = {
    "_uvarint": _uvarint,
    "_ZERO_UUID": _ZERO_UUID,
    "_kio_only": _kio_only,
    "_MISSING": dataclasses.MISSING,
    **{f"_pack_{t}": struct.Struct(">" + f).pack for t, f in _FORMATS.items()},
}
_encoders: dict[type[Any], Callable[[Any], bytes] | None] = {}


def encode_entity(entity: Any) -> bytes:
    """kio's encoding of `entity` (raises CodecError where kio cannot encode it)."""
    cls = type(entity)
    if cls not in _encoders:
        _encoders[cls] = _compile(cls)
    fast = _encoders[cls]
    if fast is not None:
        try:
            return fast(entity)
        except (_KioOnly, AttributeError, TypeError, ValueError, struct.error, OverflowError):
            pass  # kio's own error, or its own encoding, below
    return encode(entity)


class _Source:
    """Generated functions: one per entity class, and fresh names."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.functions: dict[type[Any], str] = {}
        self.constants: dict[str, Any] = {}
        self._names = 0

    def fresh(self, stem: str) -> str:
        self._names += 1
        return f"{stem}{self._names}"


class _Unsupported(Exception):
    """Internal: a kind of field no code is generated for; kio encodes the class."""


def _compile(cls: type[Any]) -> Callable[[Any], bytes] | None:
    src = _Source()
    try:
        name = _function(src, cls)
    except (_Unsupported, NotImplementedError, TypeError, KeyError):
        return None
    namespace = {**_NAMESPACE, **src.constants}
    # Source generated from kio's schema classes only, never from data.
    exec("\n".join(src.lines), namespace)
    encoder: Callable[[Any], bytes] = namespace[name]
    return encoder


def _function(src: _Source, cls: type[Any]) -> str:
    """The name of the generated function for `cls`, generating it (and its nested ones)."""
    known = src.functions.get(cls)
    if known is not None:
        return known
    name = src.functions[cls] = src.fresh("enc_")
    flexible = bool(cls.__flexible__)
    body: list[str] = []
    tags: list[str] = []
    for field in dataclasses.fields(cls):
        tag = get_field_tag(field)
        if tag is not None:
            tags.append(_tag_check(src, field))
        else:
            _field(src, body, f"e.{field.name}", field, flexible)
    lines = [f"def {name}(e):", "    out = []", "    add = out.append"]
    lines += ["    " + line for line in tags + body]
    if flexible:
        lines.append("    add(b'\\x00')")  # no tagged field to write (checked above)
    lines.append("    return b''.join(out)")
    src.lines += lines
    return name


def _tag_check(src: _Source, field: dataclasses.Field[Any]) -> str:
    """A line refusing (to kio) an entity whose tagged field kio would write."""
    default = src.fresh("_default")
    implicit = src.fresh("_implicit")
    src.constants[default] = field.default
    src.constants[implicit] = get_tagged_field_default(field)
    value = f"e.{field.name}"
    return (
        f"if not ({value} == {default} or ({default} == _MISSING and {value} == {implicit})): "
        "_kio_only()"
    )


def _field(
    src: _Source, body: list[str], value: str, field: dataclasses.Field[Any], flexible: bool
) -> None:
    kind = classify_field(field)
    nullable = is_optional(field)
    if isinstance(kind, EntityTupleField):
        inner = _function(src, kind.type_)
        _count(body, value, flexible, nullable)
        body.append(f"for x in ({value} or ()):")
        body.append(f"    add({inner}(x))")
    elif isinstance(kind, EntityField):
        inner = _function(src, kind.type_)
        if nullable:
            body.append(f"if {value} is None:")
            body.append("    add(b'\\xff')")
            body.append("else:")
            body.append("    add(b'\\x01')")
            body.append(f"    add({inner}({value}))")
        else:
            body.append(f"add({inner}({value}))")
    elif isinstance(kind, PrimitiveTupleField):
        _count(body, value, flexible, nullable)
        body.append(f"for x in ({value} or ()):")
        _primitive(body, "x", str(field.metadata["kafka_type"]), flexible, False, indent="    ")
    else:
        _primitive(body, value, str(field.metadata["kafka_type"]), flexible, nullable, indent="")


def _count(body: list[str], value: str, flexible: bool, nullable: bool) -> None:
    """An array's count: compact n + 1 (0 for null) or int32 n (-1 for null)."""
    null = "b'\\x00'" if flexible else "b'\\xff\\xff\\xff\\xff'"
    count = f"_uvarint(len({value}) + 1)" if flexible else f"_pack_int32(len({value}))"
    if nullable:
        body.append(f"add({null} if {value} is None else {count})")
    else:
        body.append(f"add({count})")


def _primitive(
    body: list[str], value: str, kafka_type: str, flexible: bool, nullable: bool, *, indent: str
) -> None:
    if kafka_type in _FORMATS and not nullable:
        body.append(f"{indent}add(_pack_{kafka_type}({value}))")
    elif kafka_type == "error_code" and not nullable:
        body.append(f"{indent}add(_pack_int16({value}.value))")
    elif kafka_type in ("timedelta_i32", "timedelta_i64") and not nullable:
        pack = "_pack_int32" if kafka_type == "timedelta_i32" else "_pack_int64"
        body.append(f"{indent}add({pack}(round({value}.total_seconds() * 1000)))")
    elif kafka_type == "uuid":
        body.append(f"{indent}add(_ZERO_UUID if {value} is None else {value}.bytes)")
    elif kafka_type in ("string", "bytes", "records"):
        raw = f"{value}.encode()" if kafka_type == "string" else value
        if flexible:
            null, length = "b'\\x00'", "_uvarint(len(b) + 1)"
        elif kafka_type == "string":
            null, length = "b'\\xff\\xff'", "_pack_int16(len(b))"
        else:
            null, length = "b'\\xff\\xff\\xff\\xff'", "_pack_int32(len(b))"
        if nullable:
            body.append(f"{indent}if {value} is None:")
            body.append(f"{indent}    add({null})")
            body.append(f"{indent}else:")
            indent += "    "
        body.append(f"{indent}b = {raw}")
        body.append(f"{indent}add({length})")
        body.append(f"{indent}add(b)")
    else:
        raise _Unsupported(kafka_type)
