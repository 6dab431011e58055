"""Hostile and broken bytes: nothing but CodecError ever leaves the codec."""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_policy_proxy.codec.errors import CodecError
from kafka_policy_proxy.codec.guarded import GUARDED_API_KEYS, guarded_api
from kafka_policy_proxy.codec.header import peek_request_header, request_body_offset
from kafka_policy_proxy.codec.metadata_request import (
    METADATA,
    decode_metadata_request,
    metadata_topics,
    without_auto_create,
)
from kafka_policy_proxy.codec.registry import encode, known_versions, request_class

FUZZ = settings.get_profile(os.environ.get("HYPOTHESIS_CODEC_FUZZ", "codec-fuzz-ci"))
MUTATIONS = settings.get_profile(os.environ.get("HYPOTHESIS_CODEC_MUTATIONS", "codec-mutations"))
GOLDEN = Path(__file__).resolve().parents[2] / "data" / "golden"
TARGETS = [
    (key, version, kind)
    for key in sorted(GUARDED_API_KEYS | {METADATA})
    for version in range(known_versions(key)[0], known_versions(key)[1] + 1)  # type: ignore[index]
    for kind in (("request",) if key == METADATA else ("request", "response"))
]


def _golden_bodies() -> list[Any]:
    bodies = []
    for entry in json.loads((GOLDEN / "manifest.json").read_text()):
        frame = (GOLDEN / entry["request"]).read_bytes()
        body = frame[request_body_offset(frame, peek_request_header(frame)) :]
        bodies.append(
            pytest.param(entry["api_key"], entry["api_version"], body, id=entry["request"])
        )
    return bodies


GOLDEN_BODIES = _golden_bodies()


def exercise(key: int, version: int, kind: str, body: bytes) -> None:
    """Everything the proxy does with a request body; only CodecError may come out."""
    try:
        if key == METADATA:
            request = decode_metadata_request(version, body)
            metadata_topics(request)
            if version >= 4:
                encode(without_auto_create(request))
            return
        api = guarded_api(key)
        assert api is not None
        if kind == "response":
            api.decode_response(version, body)
            return
        request = api.decode_request(version, body)
        items = api.topic_items(request)
        plan = api.split(request, {item.index: "denied" for item in items[::2]})
        if plan.forward is None:
            api.merge(plan, None)
        else:
            encode(plan.forward)
    except CodecError as error:
        assert error.api_key == key
        assert error.api_version == version


@FUZZ
@given(target=st.sampled_from(TARGETS), body=st.binary(max_size=96))
def test_random_bytes(target: tuple[int, int, str], body: bytes) -> None:
    exercise(*target, body)


@pytest.mark.parametrize(("key", "version", "body"), GOLDEN_BODIES)
def test_every_truncation_of_a_golden_frame_is_a_codec_error(
    key: int, version: int, body: bytes
) -> None:
    api = guarded_api(key)
    for end in range(len(body)):
        with pytest.raises(CodecError):
            if api is None:
                decode_metadata_request(version, body[:end])
            else:
                api.decode_request(version, body[:end])


@MUTATIONS
@given(data=st.data())
def test_mutated_golden_frames(data: st.DataObject) -> None:
    key, version, body = data.draw(st.sampled_from(GOLDEN_BODIES)).values
    mutated = bytearray(body)
    for _ in range(data.draw(st.integers(1, 4))):
        action = data.draw(st.sampled_from(["flip", "insert", "delete"]))
        position = data.draw(st.integers(0, max(len(mutated) - 1, 0)))
        if action == "flip" and mutated:
            mutated[position] = data.draw(st.integers(0, 255))
        elif action == "insert":
            mutated[position:position] = data.draw(st.binary(min_size=1, max_size=4))
        elif mutated:
            del mutated[position]
    exercise(key, version, "request", bytes(mutated))


@pytest.mark.parametrize(
    ("key", "version", "body"),
    [
        # A compact array of strings claiming 2**32 - 2 elements: kio alone aborts the process.
        pytest.param(20, 5, bytes.fromhex("ffffffff0f"), id="compact-string-array"),
        # One topic "a" whose one assignment claims 2**35 - 2 int32 broker ids: same abort.
        pytest.param(
            19,
            5,
            bytes.fromhex("0202610000000100010200000000ffffffff7f"),
            id="compact-int-array",
        ),
        # A legacy array of 2**31 - 1 topics in 4 bytes.
        pytest.param(19, 2, bytes.fromhex("7fffffff"), id="legacy-array"),
    ],
)
def test_huge_declared_counts_are_refused_before_kio_allocates(
    key: int, version: int, body: bytes
) -> None:
    api = guarded_api(key)
    assert api is not None
    with pytest.raises(CodecError, match="exceeds"):
        api.decode_request(version, body)


def test_errors_name_the_api_version_and_reason() -> None:
    api = guarded_api(20)
    assert api is not None
    second = datetime.timedelta(seconds=1)
    valid = encode(request_class(20, 1)(topic_names=("a",), timeout=second))
    with pytest.raises(CodecError, match=r"DeleteTopics \(key 20\) v1: 1 trailing bytes"):
        api.decode_request(1, valid + b"\x00")
    with pytest.raises(CodecError, match=r"DeleteTopics \(key 20\) v1: truncated"):
        api.decode_request(1, valid[:-1])
    flexible = encode(request_class(20, 5)(topic_names=("a",), timeout=second))
    assert flexible.endswith(b"\x00")  # an empty tagged-field section
    # One tagged field kio does not know: tag 7, one byte long.
    tagged = flexible[:-1] + bytes([1, 7, 1, 0])
    with pytest.raises(CodecError, match=r"DeleteTopics \(key 20\) v5: unknown tagged field 7"):
        api.decode_request(5, tagged)
