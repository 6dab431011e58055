"""Request and response headers: a struct-only peek, body offsets, and response header bytes."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kafka_policy_proxy.codec.errors import CodecError
from kafka_policy_proxy.codec.framing import Buffer
from kafka_policy_proxy.codec.registry import is_flexible

_HEADER = struct.Struct(">hhih")
_INT16 = struct.Struct(">h")
API_VERSIONS = 18
PRODUCE = 0


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """The fields every request header starts with, and where the client id ends."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_id_end: int


def peek_request_header(frame: bytes, offset: int = 0) -> RequestHeader:
    """Read the request header's fixed fields starting at offset (positions stay absolute)."""
    if len(frame) - offset < _HEADER.size:
        raise CodecError(-1, -1, f"request of {len(frame) - offset} bytes is shorter than a header")
    api_key, api_version, correlation_id, id_len = _HEADER.unpack_from(frame, offset)
    start = end = offset + _HEADER.size
    client_id = None
    if id_len >= 0:
        end += id_len
        if end > len(frame):
            raise CodecError(api_key, api_version, "client id runs past the end of the frame")
        try:
            client_id = frame[start:end].decode()
        except UnicodeDecodeError as exc:
            raise CodecError(api_key, api_version, "client id is not UTF-8") from exc
    elif id_len != -1:
        raise CodecError(api_key, api_version, f"invalid client id length {id_len}")
    return RequestHeader(api_key, api_version, correlation_id, client_id, end)


def request_body_offset(frame: bytes, header: RequestHeader) -> int:
    """Return where the request body starts: after the client id, and the tags in header v2."""
    if not is_flexible(header.api_key, header.api_version):
        return header.client_id_end
    return skip_tagged_fields(frame, header.client_id_end, header.api_key, header.api_version)


def response_header_size(frame: Buffer, api_key: int, api_version: int) -> int:
    """Return the size of a response header (v0, or v1 with tags; ApiVersions is always v0)."""
    if api_key == API_VERSIONS or not is_flexible(api_key, api_version):
        return 4
    return skip_tagged_fields(frame, 4, api_key, api_version)


def response_header(correlation_id: int, api_key: int, api_version: int) -> bytes:
    """Encode a response header with no tagged fields."""
    header = correlation_id.to_bytes(4, "big", signed=True)
    if api_key != API_VERSIONS and is_flexible(api_key, api_version):
        header += b"\x00"
    return header


def read_uvarint(
    data: Buffer, pos: int, api_key: int = -1, api_version: int = -1
) -> tuple[int, int]:
    """Read an unsigned varint at pos; return (value, position after it)."""
    value = 0
    shift = 0
    while True:
        if pos >= len(data):
            raise CodecError(api_key, api_version, "truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise CodecError(api_key, api_version, "varint is longer than 5 bytes")


def skip_tagged_fields(data: Buffer, pos: int, api_key: int, api_version: int) -> int:
    """Skip a tagged-field section at pos; return the position after it."""
    count, pos = read_uvarint(data, pos, api_key, api_version)
    for _ in range(count):
        _tag, pos = read_uvarint(data, pos, api_key, api_version)
        size, pos = read_uvarint(data, pos, api_key, api_version)
        pos += size
    if pos > len(data):
        raise CodecError(api_key, api_version, "tagged fields run past the end of the frame")
    return pos


def produce_acks(frame: bytes, header: RequestHeader) -> int:
    """Return a Produce request's acks, which decides whether a response will come."""
    pos = request_body_offset(frame, header)
    # transactional_id precedes acks: a nullable string, compact from v9 on.
    if is_flexible(PRODUCE, header.api_version):
        length, pos = read_uvarint(frame, pos, PRODUCE, header.api_version)
        pos += max(length - 1, 0)
    else:
        if pos + 2 > len(frame):
            raise CodecError(PRODUCE, header.api_version, "truncated transactional id")
        (length,) = _INT16.unpack_from(frame, pos)
        pos += 2 + max(length, 0)
    if pos + 2 > len(frame):
        raise CodecError(PRODUCE, header.api_version, "truncated before acks")
    acks: int = _INT16.unpack_from(frame, pos)[0]
    return acks


def request_header(api_key: int, api_version: int, correlation_id: int, client_id: str) -> bytes:
    """Encode a request header (v1, or v2 with an empty tag section for flexible versions)."""
    raw_id = client_id.encode()
    header = _HEADER.pack(api_key, api_version, correlation_id, len(raw_id)) + raw_id
    if is_flexible(api_key, api_version):
        header += b"\x00"
    return header
