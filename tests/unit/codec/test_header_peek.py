"""Request header peek, body offsets and Produce acks, against kio-encoded requests."""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.messages import build
from kafka_policy_proxy.codec.errors import CodecError
from kafka_policy_proxy.codec.header import (
    peek_request_header,
    produce_acks,
    request_body_offset,
    request_header,
    response_header,
    response_header_size,
)
from kafka_policy_proxy.codec.registry import decode_exact, encode, request_class


def _produce(version: int, acks: int, transactional_id: str | None) -> bytes:
    message = build(
        request_class(0, version),
        transactional_id=transactional_id,
        acks=acks,
        timeout=1000,
        topic_data=(),
    )
    return request_header(0, version, 7, "client-a") + encode(message)


@pytest.mark.parametrize("version", range(3, 14))
@pytest.mark.parametrize("acks", [0, 1, -1])
@pytest.mark.parametrize("transactional_id", [None, "", "tx-1"])
def test_produce_acks_every_version(version: int, acks: int, transactional_id: str | None) -> None:
    frame = _produce(version, acks, transactional_id)
    header = peek_request_header(frame)
    assert (header.api_key, header.api_version, header.correlation_id) == (0, version, 7)
    assert header.client_id == "client-a"
    assert produce_acks(frame, header) == acks


@pytest.mark.parametrize("version", range(4, 14))
def test_body_offset_lands_on_the_body(version: int) -> None:
    cls = request_class(3, version)
    message = build(
        cls,
        topics=None,
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    frame = b"\x00\x00\x00\x00" + request_header(3, version, 1, "c") + encode(message)
    header = peek_request_header(frame, 4)
    assert decode_exact(cls, frame, request_body_offset(frame, header)) == message


@given(st.integers(-(2**31), 2**31 - 1), st.none() | st.text(max_size=40))
def test_peek_reads_any_correlation_id_and_client_id(
    correlation_id: int, client_id: str | None
) -> None:
    raw = b"" if client_id is None else client_id.encode()
    length = -1 if client_id is None else len(raw)
    frame = struct.pack(">hhih", 19, 7, correlation_id, length) + raw + b"\x00rest"
    header = peek_request_header(frame)
    assert (header.correlation_id, header.client_id) == (correlation_id, client_id)


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        b"\x00\x13\x00\x07",
        struct.pack(">hhih", 19, 7, 1, 50) + b"short",
        struct.pack(">hhih", 19, 7, 1, -2),
        struct.pack(">hhih", 19, 7, 1, 2) + b"\xff\xfe",
    ],
)
def test_malformed_headers_raise_codec_error(frame: bytes) -> None:
    with pytest.raises(CodecError):
        peek_request_header(frame)


def test_response_headers() -> None:
    # ApiVersions responses always use header v0, even for flexible versions (KIP-511).
    assert response_header(5, 18, 3) == struct.pack(">i", 5)
    assert response_header(5, 19, 7) == struct.pack(">i", 5) + b"\x00"
    assert response_header(5, 19, 4) == struct.pack(">i", 5)
    assert response_header_size(response_header(5, 19, 7) + b"body", 19, 7) == 5
