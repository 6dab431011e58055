"""Split requests forwarded, and split answers merged, by byte ranges: byte-equal to kio's
encoding in every version of every guarded API, and kio's own path wherever the bytes are not
exactly what kio would write."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_policy_proxy.codec.byte_ranges import array_layout
from kafka_policy_proxy.codec.errors import CodecError
from kafka_policy_proxy.codec.guarded import GUARDED_API_KEYS, Rewrite, SplitPlan, guarded_api
from kafka_policy_proxy.codec.guarded.base import GuardedApi, element_class
from kafka_policy_proxy.codec.kio_introspect import EntityTupleField, classify_field
from kafka_policy_proxy.codec.registry import encode, request_class, response_class
from tests.unit.codec.guarded_cases import CASES
from tests.unit.codec.kio_strategies import entities

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# The policy's overrides rewrite creates and config changes only.
REWRITABLE = {19, 33, 44}
# Bytes before the body (a request header, in the proxy): offsets must be honoured.
PREFIX = b"\x00\x07\x07"


def _versions() -> list[Any]:
    return [
        pytest.param(key, version, id=f"{key}-v{version}")
        for key in sorted(GUARDED_API_KEYS)
        for version in guarded_api(key).versions()  # type: ignore[union-attr]
    ]


def _api(key: int) -> GuardedApi:
    api = guarded_api(key)
    assert api is not None
    return api


def _top_array(cls: type[Any], field_name: str) -> st.SearchStrategy[Any]:
    """Messages of `cls` with up to 8 elements in the array `field_name`, all else drawn."""
    field = next(f for f in dataclasses.fields(cls) if f.name == field_name)
    kind = classify_field(field)
    element = entities(kind.type_) if isinstance(kind, EntityTupleField) else st.text(max_size=6)
    return st.tuples(entities(cls), st.lists(element, max_size=8)).map(
        lambda drawn: dataclasses.replace(drawn[0], **{field_name: tuple(drawn[1])})
    )


@st.composite
def _plans(draw: st.DrawFn, key: int, version: int) -> tuple[bytes, SplitPlan]:
    """A request as a client sends it (behind PREFIX), and a split of it."""
    api = _api(key)
    cls = request_class(key, version)
    field = "topic_names" if key == 20 and version < 6 else api.entries_field
    body = PREFIX + encode(draw(_top_array(cls, field)))
    request = api.decode_request(version, body[len(PREFIX) :])
    count = len(api.entries(request))
    indexes = st.integers(0, max(count - 1, 0))
    denied = draw(st.sets(indexes, max_size=count)) if count else set()
    rewrites = {}
    if key in REWRITABLE and count:
        for index in draw(st.sets(indexes, max_size=count)) - denied:
            entry = api.entries(request)[index]
            names = [c.name for c in entry.configs] + ["retention.ms", "x"]
            configs = draw(st.lists(st.tuples(st.sampled_from(names), st.text(max_size=4))))
            partitions = draw(st.none() | st.integers(1, 100)) if key == 19 else None
            rewrites[index] = Rewrite(partitions, tuple(configs))
    plan = api.split(request, {i: f"no {i}" for i in denied}, rewrites=rewrites)
    return body, plan


@pytest.mark.parametrize(("key", "version"), _versions())
@PROPERTY
@given(data=st.data())
def test_the_forwarded_bytes_are_kios_encoding(key: int, version: int, data: Any) -> None:
    body, plan = data.draw(_plans(key, version))
    api = _api(key)
    if plan.forward is None:
        return
    layout = array_layout(
        request_class(key, version), api.entries_field_of(plan.request), body, len(PREFIX)
    )
    assert layout is not None, "kio's own encoding must take the byte path"
    assert api.forward_body(plan, body, len(PREFIX)) == encode(plan.forward)


@pytest.mark.parametrize(("key", "version"), _versions())
@PROPERTY
@given(data=st.data())
def test_any_answer_merged_from_its_bytes_is_kios_merge(key: int, version: int, data: Any) -> None:
    """Answers of every shape (tagged fields, nulls, results no entry asked for)."""
    _, plan = data.draw(_plans(key, version))
    api = _api(key)
    if plan.forward is None:
        return
    cls = response_class(key, version)
    answer = encode(data.draw(_top_array(cls, api.results_field)))
    assert array_layout(cls, api.results_field, answer, exact=False) is not None
    kio_merged = api.merge(plan, api.decode_response(version, answer))
    assert api.merge_body(plan, answer) == kio_merged


@pytest.mark.parametrize(("key", "version"), _versions())
@PROPERTY
@given(
    names=st.lists(st.sampled_from(["a", "b", "c", "broker:1", "broker:"]), min_size=1, max_size=9),
    data=st.data(),
)
def test_a_brokers_answer_merged_from_its_bytes_is_kios_merge(
    key: int, version: int, names: list[str], data: Any
) -> None:
    """Answers that match what was forwarded, in shuffled order, duplicates included."""
    case = CASES[key]
    if key not in (33, 44):
        names = [n.replace("broker:", "t") for n in names]
    api = _api(key)
    request = api.decode_request(version, encode(case.request(version, names)))
    denied = data.draw(st.sets(st.integers(0, len(names) - 1)))
    plan = api.split(request, {i: f"no {i}" for i in denied}, legacy_error_code=44)
    if plan.forward is None:
        return
    answer = encode(case.broker_answer(plan.forward, seed=data.draw(st.integers(0, 99))))
    assert api.merge_body(plan, answer) == api.merge(plan, api.decode_response(version, answer))


def _over_long_count(body: bytes) -> bytes:
    """The compact topics count (one byte) re-written as a two-byte varint of the same value."""
    return bytes([body[0] | 0x80, 0]) + body[1:]


def test_an_over_long_varint_is_forwarded_as_kio_encodes_it() -> None:
    """kio reads an over-long varint, and so would the broker; but those bytes are not kio's,
    so the request goes the kio way."""
    api = _api(19)
    sent = _over_long_count(encode(CASES[19].request(7, ["a", "b", "c"])))
    request = api.decode_request(7, sent)
    plan = api.split(request, {1: "no"})
    assert array_layout(request_class(19, 7), "topics", sent) is None
    forwarded = api.forward_body(plan, sent, 0)
    assert forwarded == encode(plan.forward)
    assert [t.name for t in api.decode_request(7, forwarded).topics] == ["a", "c"]


def test_a_tagged_field_in_an_answer_is_passed_on() -> None:
    """The broker's tagged fields (a config error for one topic) reach the client."""
    api = _api(19)
    plan = api.split(CASES[19].request(7, ["a", "b"]), {0: "no"})
    assert plan.forward is not None
    broker = CASES[19].broker_answer(plan.forward)
    result = dataclasses.replace(broker.topics[0], topic_config_error_code=29)
    answer = encode(dataclasses.replace(broker, topics=(result,)))
    merged = api.merge_body(plan, answer)
    assert merged == api.merge(plan, api.decode_response(7, answer))
    assert [t.topic_config_error_code for t in api.decode_response(7, merged).topics] == [0, 29]


def test_an_answer_that_cannot_be_walked_is_refused_as_kio_refuses_it() -> None:
    api = _api(19)
    plan = api.split(CASES[19].request(7, ["a", "b"]), {0: "no"})
    assert plan.forward is not None
    answer = encode(CASES[19].broker_answer(plan.forward))
    with pytest.raises(CodecError):
        api.merge_body(plan, answer[:-3])
    with pytest.raises(CodecError):
        api.merge_body(plan, answer + b"\x00")


@pytest.mark.parametrize(("key", "version"), _versions())
@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=64))
def test_random_bytes_never_raise(key: int, version: int, data: bytes) -> None:
    api = _api(key)
    for cls, field in (
        (request_class(key, version), "topic_names" if key == 20 and version < 6 else None),
        (response_class(key, version), api.results_field),
    ):
        name = field or api.entries_field
        for exact in (True, False):
            layout = array_layout(cls, name, data, exact=exact)
            if layout is not None:
                assert all(0 <= s <= e <= len(data) for s, e in layout.elements)
                parts = [data[s:e] for s, e in layout.elements]
                # An exact walk saw kio's own encoding, the count included.
                assert layout.with_elements(parts) == data or not exact


def test_every_response_element_class_is_known() -> None:
    """The results arrays the merge walks are arrays of entities in every version."""
    for key in GUARDED_API_KEYS:
        api = _api(key)
        for version in api.versions():
            element_class(response_class(key, version), api.results_field)
