"""Entry counts read before decoding: every guarded API and version, and malformed counts."""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

import pytest

from kafka_policy_proxy.codec.entry_counts import top_level_count
from kafka_policy_proxy.codec.errors import CodecError
from kafka_policy_proxy.codec.guarded import GUARDED_API_KEYS, guarded_api
from kafka_policy_proxy.codec.prescan import count_elements
from kafka_policy_proxy.codec.registry import encode, request_class
from tests.unit.codec.guarded_cases import CASES

VERSIONS = [
    (key, version) for key in sorted(GUARDED_API_KEYS) for version in guarded_api(key).versions()
]


def _elements(value: Any) -> int:
    """Every array element in a decoded message, nested ones included (the reference count)."""
    if isinstance(value, tuple):
        return len(value) + sum(_elements(v) for v in value)
    if dataclasses.is_dataclass(value):
        return sum(_elements(getattr(value, f.name)) for f in dataclasses.fields(value))
    return 0


def _body(key: int, version: int, count: int) -> bytes:
    return encode(CASES[key].request(version, [f"t{i}" for i in range(count)]))


def test_every_guarded_api_has_a_case() -> None:
    assert set(CASES) == GUARDED_API_KEYS


@pytest.mark.parametrize(("key", "version"), VERSIONS)
@pytest.mark.parametrize("count", [0, 1, 130, 17_000])
def test_the_top_level_count_is_read_without_decoding(key: int, version: int, count: int) -> None:
    # 130 and 17,000 need a 2- and a 3-byte varint in flexible versions.
    body = _body(key, version, count)
    assert top_level_count(request_class(key, version), body) == count


@pytest.mark.parametrize(("key", "version"), VERSIONS)
def test_the_count_is_read_at_an_offset_into_a_frame(key: int, version: int) -> None:
    body = _body(key, version, 3)
    assert top_level_count(request_class(key, version), b"\xff" * 9 + body, 9) == 3


@pytest.mark.parametrize(("key", "version"), VERSIONS)
def test_count_elements_matches_the_decoded_message(key: int, version: int) -> None:
    message = CASES[key].request(version, [f"t{i}" for i in range(40)])
    body = encode(message)
    cls = request_class(key, version)
    expected = _elements(message)
    assert count_elements(cls, body, 0, expected) == expected
    # One element over the budget: the walk stops and says so.
    assert count_elements(cls, body, 0, expected - 1) is None


def test_count_elements_stops_at_the_budget_before_walking_the_entries() -> None:
    # A DeleteTopics v5 array declaring a million empty names: refused at its count.
    cls = request_class(20, 5)
    body = _uvarint((1 << 20) + 1) + b"\x01" * (1 << 20) + b"\x00\x00\x75\x30\x00"
    assert top_level_count(cls, body) == 1 << 20
    assert count_elements(cls, body, 0, 20_000) is None


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _first_array_at(key: int, version: int) -> int:
    return 6 if (key, version) == (45, 1) else 4 if key == 45 else 0


@pytest.mark.parametrize(("key", "version"), VERSIONS)
def test_malformed_counts_are_codec_errors(key: int, version: int) -> None:
    cls = request_class(key, version)
    at = _first_array_at(key, version)
    head = b"\x00" * at
    if cls.__flexible__:
        bad = [head, head + b"\x00", head + b"\x80\x80", head + b"\xff" * 5 + b"\x01"]
    else:
        bad = [head, head + b"\x00\x00", head + struct.pack(">i", -1), head + struct.pack(">i", -7)]
    for body in bad:
        with pytest.raises(CodecError):
            top_level_count(cls, body)


def test_a_huge_declared_count_is_reported_not_allocated() -> None:
    cls = request_class(19, 7)
    assert top_level_count(cls, b"\xff\xff\xff\xff\x0f") == 2**32 - 2
    assert top_level_count(request_class(19, 4), struct.pack(">i", 2**31 - 1)) == 2**31 - 1


def test_a_class_whose_array_follows_a_variable_field_is_refused() -> None:
    with pytest.raises(TypeError, match="not fixed-size"):
        top_level_count(request_class(36, 2), b"\x00")  # SaslAuthenticate: bytes, no array
