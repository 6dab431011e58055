"""How many entries a request declares, read before anything is decoded into objects.

Decoding a request (kio) and pre-scanning it (`codec/prescan.py`) both cost one Python or Rust
object, or one step, per entry: a 1 MiB DeleteTopics of a million empty names costs a million
of each. The top-level array of every request the proxy bounds (topics, topic names,
resources, topic partitions) is preceded only by fixed-size fields, so its count sits at a
fixed offset in the body and is read here in constant time. Nested arrays (partitions per
topic, configs per resource) are counted by `prescan.count_elements`, whose walk stops at a
budget.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

from kafka_policy_proxy.codec.errors import CodecError
from kafka_policy_proxy.codec.kio_introspect import classify_field, is_optional

_FIXED_SIZES = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "timedelta_i64": 8,
}
_INT32 = struct.Struct(">i")
_VARINT_MAX_BYTES = 5


@dataclasses.dataclass(frozen=True, slots=True)
class _Head:
    """Where a request class's top-level array count sits, and how it is written."""

    offset: int  # from the start of the body
    flexible: bool
    nullable: bool


_heads: dict[type[Any], _Head] = {}


def _head(cls: type[Any]) -> _Head:
    head = _heads.get(cls)
    if head is None:
        head = _heads[cls] = _find_head(cls)
    return head


def _find_head(cls: type[Any]) -> _Head:
    offset = 0
    for field in dataclasses.fields(cls):
        if classify_field(field).is_array:
            return _Head(offset, bool(cls.__flexible__), is_optional(field))
        size = _FIXED_SIZES.get(str(field.metadata.get("kafka_type")))
        if size is None:
            raise TypeError(f"{cls.__name__}.{field.name} precedes the array and is not fixed-size")
        offset += size
    raise TypeError(f"{cls.__name__} has no array field")


def top_level_count(cls: type[Any], data: bytes, offset: int = 0) -> int:
    """The element count of the first array of a `cls` message in data[offset:]; 0 if null.

    Reads a few bytes whatever the count; raises CodecError for a truncated, negative or
    over-long count (the pre-scan would refuse those too).
    """
    head = _head(cls)
    pos = offset + head.offset
    key, version = int(cls.__api_key__), int(cls.__version__)
    if head.flexible:
        raw = 0
        for i in range(_VARINT_MAX_BYTES):
            if pos + i >= len(data):
                raise CodecError(key, version, "truncated array count")
            byte = data[pos + i]
            raw |= (byte & 0x7F) << (7 * i)
            if not byte & 0x80:
                break
        else:
            raise CodecError(key, version, "array count varint longer than 5 bytes")
        count = raw - 1  # compact: n + 1, and 0 for null
    else:
        if pos + 4 > len(data):
            raise CodecError(key, version, "truncated array count")
        count = _INT32.unpack_from(data, pos)[0]
    if count == -1 and head.nullable:
        return 0
    if count < 0:
        raise CodecError(key, version, f"array count {count} is negative")
    return int(count)
