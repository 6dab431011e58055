"""Where each element of a message's top-level array sits in its bytes, found without kio.

A split request forwards the bytes of its kept entries, and a split answer is the broker's
results interleaved with the proxy's own, so both only need to know where each element of one
array starts and ends (and, for an answer, the few fields its key is made of). A walker that
knows the schema finds that in one pass over the bytes, with no object per field; it is
generated once per kio class as straight-line Python (nested arrays as nested loops), since
a walk of closures costs several times more on a 780 KB CreateTopics answer.

Two strictnesses:
- `exact=True` (what is forwarded to the broker): the bytes must be exactly what kio encodes
  for what kio decoded from them, so that forwarding them is the same as re-encoding what was
  judged. Anything else returns None and the caller re-encodes with kio: an over-long varint,
  a boolean other than 0 or 1, or any tagged field (kio leaves out those at their default,
  and none of the guarded requests has one).
- `exact=False` (the broker's answer, passed on as the broker wrote it): the structure only;
  tagged fields are skipped by their sizes.
Malformed bytes return None in both.
"""

from __future__ import annotations

import dataclasses
import struct
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kafka_policy_proxy.codec.kio_introspect import (
    FIXED_SIZES,
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)

_ZERO_UUID = bytes(16)
Buffer = bytes | memoryview


class _NotExact(Exception):
    """Internal: the bytes are malformed, or (exact walks) not kio's own encoding."""


@dataclass(frozen=True, slots=True)
class ArrayLayout:
    """One message's top-level array: the bytes around it and where its elements are.

    `elements[i]` is (start, end) in the walked buffer; `keys[i]` holds the captured fields
    of element i, by name, decoded as kio decodes them.
    """

    head: bytes  # the message's bytes before the array's count
    tail: bytes  # the message's bytes after the array's last element
    elements: tuple[tuple[int, int], ...]
    keys: tuple[dict[str, Any], ...]
    flexible: bool

    def with_elements(self, parts: Sequence[Buffer]) -> bytes:
        """The message with the array's elements replaced by `parts` (each one's bytes)."""
        n = len(parts)
        count = _uvarint_bytes(n + 1) if self.flexible else n.to_bytes(4, "big")
        return b"".join((self.head, count, *parts, self.tail))


# data, offset -> (count position, array end, message end, element starts, captured fields)
_Walk = Callable[[bytes, int], tuple[int, int, int, list[int], list[dict[str, Any]]]]
_walks: dict[tuple[type[Any], str, tuple[str, ...], bool], _Walk] = {}


def array_layout(
    cls: type[Any],
    field_name: str,
    data: bytes,
    offset: int = 0,
    *,
    capture: tuple[str, ...] = (),
    exact: bool = True,
) -> ArrayLayout | None:
    """The layout of `cls`'s array `field_name` in data[offset:] (one whole message), or None
    where the bytes are malformed or, with `exact`, not kio's encoding of what they hold.

    `capture` names fields of the array's elements (strings, ints, uuids) to decode per
    element; the array must be one of entities if any are named.
    """
    if not isinstance(data, bytes):
        data = bytes(data)  # slices of it are decoded as strings
    key = (cls, field_name, capture, exact)
    walk = _walks.get(key)
    if walk is None:
        walk = _walks[key] = _compile(cls, field_name, capture, exact)
    try:
        count_at, array_end, end, starts, keys = walk(data, offset)
    except (_NotExact, IndexError, struct.error, UnicodeDecodeError):
        return None
    if end != len(data):
        return None
    ends = [*starts[1:], array_end] if starts else []
    return ArrayLayout(
        head=data[offset:count_at],
        tail=data[array_end:],
        elements=tuple(zip(starts, ends, strict=True)),
        keys=tuple(keys),
        flexible=bool(cls.__flexible__),
    )


def _uvarint_bytes(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _uvarint(data: bytes, pos: int, exact: bool) -> tuple[int, int]:
    """A multi-byte unsigned varint at pos: (value, position after it)."""
    value = 0
    for i in range(5):
        byte = data[pos + i]
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            if exact and byte == 0 and i:
                raise _NotExact("over-long varint")
            return value, pos + i + 1
    raise _NotExact("varint longer than 5 bytes")


def _skip_tags(data: bytes, pos: int) -> int:
    """Past a tagged-field section that is not empty (structure only)."""
    count, pos = _uvarint(data, pos, False)
    for _ in range(count):
        _, pos = _uvarint(data, pos, False)
        size, pos = _uvarint(data, pos, False)
        pos += size
    if pos > len(data):
        raise _NotExact("tagged field past the end")
    return pos


def _not_exact(reason: str) -> None:
    raise _NotExact(reason)


def _uuid(raw: bytes) -> uuid.UUID | None:
    return None if raw == _ZERO_UUID else uuid.UUID(bytes=raw)


_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from
_NAMESPACE: dict[str, Any] = {
    "_uvarint": _uvarint,
    "_skip_tags": _skip_tags,
    "_not_exact": _not_exact,
    "_uuid": _uuid,
    "_I16": _I16,
    "_I32": _I32,
}


class _Source:
    """Python source being generated: lines at an indent, and fresh variable names."""

    def __init__(self, exact: bool) -> None:
        self.lines: list[str] = []
        self.exact = exact
        self._names = 0

    def add(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)

    def fresh(self, stem: str) -> str:
        self._names += 1
        return f"{stem}{self._names}"


def _length(src: _Source, indent: int, flexible: bool, width: int, var: str) -> None:
    """`var` = a length or count at pos (compact: n + 1 decoded to n), pos moved past it."""
    if flexible:
        src.add(indent, f"{var} = data[pos]")
        src.add(indent, f"if {var} > 127:")
        src.add(indent + 1, f"{var}, pos = _uvarint(data, pos, {src.exact})")
        src.add(indent, "else:")
        src.add(indent + 1, "pos += 1")
        src.add(indent, f"{var} -= 1")
    else:
        unpack = "_I16" if width == 2 else "_I32"
        src.add(indent, f"{var} = {unpack}(data, pos)[0]")
        src.add(indent, f"pos += {width}")


def _null_or_negative(src: _Source, indent: int, var: str, nullable: bool) -> None:
    """Refuse a negative length, but -1 where null is allowed."""
    if nullable:
        src.add(indent, f"if {var} < -1:")
    else:
        src.add(indent, f"if {var} < 0:")
    src.add(indent + 1, '_not_exact("negative length")')


def _primitive(src: _Source, indent: int, kafka_type: str, flexible: bool, nullable: bool) -> None:
    """Skip one primitive value."""
    size = FIXED_SIZES.get(kafka_type)
    if size is not None:
        if kafka_type == "bool" and src.exact:
            src.add(indent, "if data[pos] > 1:")
            src.add(indent + 1, '_not_exact("boolean other than 0 or 1")')
        src.add(indent, f"pos += {size}")
        return
    if kafka_type not in ("string", "bytes", "records"):
        raise TypeError(f"no byte-range rule for kafka type {kafka_type!r}")
    n = src.fresh("n")
    _length(src, indent, flexible, 2 if kafka_type == "string" else 4, n)
    _null_or_negative(src, indent, n, nullable)
    if nullable:
        src.add(indent, f"if {n} > 0:")
        src.add(indent + 1, f"pos += {n}")
    else:
        src.add(indent, f"pos += {n}")


def _capture(src: _Source, indent: int, field: dataclasses.Field[Any], flexible: bool) -> None:
    """Decode one captured field into the element's `got` dict, as kio decodes it."""
    kafka_type = str(field.metadata.get("kafka_type"))
    nullable = is_optional(field)
    target = f"got[{field.name!r}]"
    if kafka_type == "string":
        n = src.fresh("n")
        _length(src, indent, flexible, 2, n)
        _null_or_negative(src, indent, n, nullable)
        if nullable:
            src.add(indent, f"if {n} < 0:")
            src.add(indent + 1, f"{target} = None")
            src.add(indent, "else:")
            indent += 1
        src.add(indent, f"{target} = data[pos:pos + {n}].decode()")
        src.add(indent, f"pos += {n}")
    elif kafka_type == "uuid":
        src.add(indent, f"{target} = _uuid(data[pos:pos + 16])")
        src.add(indent, "pos += 16")
    elif kafka_type in ("int8", "int16", "int32"):
        size = FIXED_SIZES[kafka_type]
        src.add(indent, f"{target} = int.from_bytes(data[pos:pos + {size}], 'big', signed=True)")
        src.add(indent, f"pos += {size}")
    else:
        raise TypeError(f"cannot capture {field.name} of kafka type {kafka_type!r}")


def _array_count(src: _Source, indent: int, flexible: bool, nullable: bool) -> str:
    """Read an array's count into a fresh variable; a null array leaves it at -1."""
    count = src.fresh("count")
    _length(src, indent, flexible, 4, count)
    _null_or_negative(src, indent, count, nullable)
    # Every element takes a byte at least: a count beyond the bytes left is malformed.
    src.add(indent, f"if {count} > len(data) - pos:")
    src.add(indent + 1, '_not_exact("more elements than bytes")')
    return count


def _field(
    src: _Source, indent: int, field: dataclasses.Field[Any], flexible: bool, depth: int
) -> None:
    """Skip one field (not a tagged one)."""
    kind = classify_field(field)
    nullable = is_optional(field)
    if isinstance(kind, EntityTupleField):
        count = _array_count(src, indent, flexible, nullable)
        src.add(indent, f"for _ in range({count}):")
        _entity(src, indent + 1, kind.type_, depth + 1)
    elif isinstance(kind, EntityField):
        if nullable:
            marker = src.fresh("marker")
            src.add(indent, f"{marker} = data[pos]")
            src.add(indent, "pos += 1")
            src.add(indent, f"if {marker} not in (1, 255):")
            src.add(indent + 1, '_not_exact("bad nullable struct marker")')
            src.add(indent, f"if {marker} == 1:")
            _entity(src, indent + 1, kind.type_, depth + 1)
        else:
            _entity(src, indent, kind.type_, depth + 1)
    elif isinstance(kind, PrimitiveTupleField):
        kafka_type = str(field.metadata["kafka_type"])
        count = _array_count(src, indent, flexible, nullable)
        size = FIXED_SIZES.get(kafka_type)
        if size is not None and not (kafka_type == "bool" and src.exact):
            src.add(indent, f"if {count} > 0:")
            src.add(indent + 1, f"pos += {count} * {size}")
        else:
            src.add(indent, f"for _ in range({count}):")
            _primitive(src, indent + 1, kafka_type, flexible, False)
    else:
        _primitive(src, indent, str(field.metadata["kafka_type"]), flexible, nullable)


def _tags(src: _Source, indent: int) -> None:
    """A flexible entity's tagged-field section: empty where exact, skipped otherwise."""
    src.add(indent, "if data[pos]:")
    if src.exact:
        src.add(indent + 1, '_not_exact("tagged fields")')
    else:
        src.add(indent + 1, "pos = _skip_tags(data, pos)")
    src.add(indent, "else:")
    src.add(indent + 1, "pos += 1")


def _entity(
    src: _Source, indent: int, cls: type[Any], depth: int, capture: tuple[str, ...] = ()
) -> None:
    """Skip one entity, capturing the named fields into `got`."""
    if depth > 8:
        raise TypeError(f"{cls.__name__} nests too deep for a byte-range walker")
    flexible = bool(cls.__flexible__)
    for field in dataclasses.fields(cls):
        if get_field_tag(field) is not None:
            continue
        if field.name in capture:
            _capture(src, indent, field, flexible)
        else:
            _field(src, indent, field, flexible, depth)
    if flexible:
        _tags(src, indent)


def _build(src: _Source, name: str) -> Any:
    namespace = dict(_NAMESPACE)
    # Source generated from kio's schema classes only, never from data.
    exec("\n".join(src.lines), namespace)
    return namespace[name]


def _compile(cls: type[Any], field_name: str, capture: tuple[str, ...], exact: bool) -> _Walk:
    """The walker of one `cls` message from an offset to its end."""
    flexible = bool(cls.__flexible__)
    fields = [f for f in dataclasses.fields(cls) if get_field_tag(f) is None]
    at = [f.name for f in fields].index(field_name)
    array = fields[at]
    src = _Source(exact)
    src.add(0, "def walk(data, pos):")
    for field in fields[:at]:
        _field(src, 1, field, flexible, 0)
    src.add(1, "count_at = pos")
    count = _array_count(src, 1, flexible, False)
    src.add(1, "starts = []")
    src.add(1, "keys = []")
    src.add(1, f"for _ in range({count}):")
    src.add(2, "starts.append(pos)")
    src.add(2, "got = {}")
    src.add(2, "keys.append(got)")
    kind = classify_field(array)
    if isinstance(kind, EntityTupleField):
        _entity(src, 2, kind.type_, 1, capture)
    elif isinstance(kind, PrimitiveTupleField) and not capture:
        _primitive(src, 2, str(array.metadata["kafka_type"]), flexible, False)
    else:
        raise TypeError(f"{cls.__name__}.{field_name} is not an array whose fields can be captured")
    src.add(1, "array_end = pos")
    for field in fields[at + 1 :]:
        _field(src, 1, field, flexible, 0)
    if flexible:
        _tags(src, 1)
    src.add(1, "return count_at, array_end, pos, starts, keys")
    walk: _Walk = _build(src, "walk")
    return walk
