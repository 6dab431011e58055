"""kio message classes by (api key, version), and whole-body decode/encode with length checks."""

from __future__ import annotations

import io
from functools import cache
from typing import Any

from kio.index import KioIndexError, load_request_schema, load_response_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError
from kio.static.protocol import Entity

from kafka_policy_proxy.codec.errors import CodecError


@cache
def request_class(api_key: int, api_version: int) -> type[Any]:
    """Return the kio request class for this API version, or raise CodecError."""
    try:
        return load_request_schema(api_key, api_version)
    except KioIndexError as exc:
        raise CodecError(api_key, api_version, "unsupported API or version") from exc


@cache
def response_class(api_key: int, api_version: int) -> type[Any]:
    """Return the kio response class for this API version, or raise CodecError."""
    try:
        return load_response_schema(api_key, api_version)
    except KioIndexError as exc:
        raise CodecError(api_key, api_version, "unsupported API or version") from exc


@cache
def known_versions(api_key: int) -> tuple[int, int] | None:
    """Return (min, max) versions kio knows for an API key, or None for an unknown key."""
    name = api_key_map.get(api_key)
    if name is None:
        return None
    versions = schema_name_map[name].keys()
    return min(versions), max(versions)


@cache
def is_flexible(api_key: int, api_version: int) -> bool:
    """Whether this API version uses flexible (compact, tagged) encoding."""
    return bool(request_class(api_key, api_version).__flexible__)


_readers: dict[type[Any], Any] = {}
_writers: dict[type[Any], Any] = {}


def _reader(cls: type[Any]) -> Any:
    reader = _readers.get(cls)
    if reader is None:
        reader = _readers[cls] = entity_reader(cls)
    return reader


def _writer(cls: type[Any]) -> Any:
    writer = _writers.get(cls)
    if writer is None:
        writer = _writers[cls] = entity_writer(cls)
    return writer


def decode_exact(cls: type[Any], data: bytes, offset: int = 0) -> Any:
    """Decode one message of `cls` from data[offset:], requiring every byte to be consumed."""
    key = int(cls.__api_key__)
    version = int(cls.__version__)
    try:
        value, size = _reader(cls)(bytes(data), offset)
    # kio raises KeyError for an unknown tagged field.
    except (SerialError, ValueError, UnicodeDecodeError, OverflowError, KeyError) as exc:
        raise CodecError(key, version, f"{type(exc).__name__}: {exc}") from exc
    if offset + size != len(data):
        trailing = len(data) - offset - size
        raise CodecError(key, version, f"{trailing} trailing bytes after the message")
    return value


def encode(message: Entity) -> bytes:
    """Encode a kio message body (no header, no size prefix)."""
    cls: Any = type(message)
    buffer = io.BytesIO()
    try:
        _writer(cls)(buffer, message)
    except (ValueError, TypeError, OverflowError, KeyError, AttributeError) as exc:
        raise CodecError(
            int(cls.__api_key__), int(cls.__version__), f"cannot encode: {exc}"
        ) from exc
    return buffer.getvalue()
