"""The request bounds filter: entries counted before decoding, then answered or closed."""

from __future__ import annotations

import contextlib
import importlib
from pathlib import Path
from typing import Any

import pytest

from harness.messages import build
from kafka_policy_proxy.codec import prescan
from kafka_policy_proxy.codec.admin_denials import ANSWERABLE
from kafka_policy_proxy.codec.entry_counts import top_level_count
from kafka_policy_proxy.codec.errors import CodecError
from kafka_policy_proxy.codec.framing import framed
from kafka_policy_proxy.codec.guarded import GUARDED_API_KEYS, guarded_api
from kafka_policy_proxy.codec.header import request_header
from kafka_policy_proxy.codec.registry import (
    decode_exact,
    known_versions,
    request_class,
    response_class,
)
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.proxy.filters.api import Answer, Close, Forward
from kafka_policy_proxy.proxy.filters.assembly import proxy_chain
from kafka_policy_proxy.proxy.filters.request_bounds import (
    BOUNDED_ADMIN_KEYS,
    RequestBoundsFilter,
)
from tests.unit.codec.guarded_cases import CASES
from tests.unit.proxy.contexts import context, context_of, settle
from tests.unit.proxy.enforcement_fakes import FakeReader, Records, live_facts

INVALID_REQUEST = 42
VERSIONS = [
    (key, version) for key in sorted(GUARDED_API_KEYS) for version in guarded_api(key).versions()
]


def _names(count: int) -> list[str]:
    return [f"t{i}" for i in range(count)]


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def million_empty_names() -> bytes:
    """The issue's frame: DeleteTopics v5 naming 1,048,576 empty topics (1 MiB)."""
    count = 1 << 20
    body = _uvarint(count + 1) + b"\x01" * count + b"\x00\x00\x75\x30\x00"
    return framed(request_header(20, 5, 7, "attacker"), body)


@pytest.fixture
def no_decoding(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Fails the test if anything pre-scans or decodes the request's entries."""
    calls: list[str] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        calls.append("walk")
        raise AssertionError("the entries were walked")

    monkeypatch.setattr(prescan, "_entity_step", refuse)
    return calls


@pytest.mark.parametrize(("key", "version"), VERSIONS)
def test_a_request_within_the_bound_goes_on_untouched(key: int, version: int) -> None:
    ctx = context(key, version, CASES[key].request(version, _names(5)))
    assert RequestBoundsFilter(5).on_request(ctx) == Forward()


@pytest.mark.parametrize(("key", "version"), VERSIONS)
def test_over_the_bound_every_entry_is_answered_invalid_request(key: int, version: int) -> None:
    case = CASES[key]
    ctx = context(key, version, case.request(version, _names(12)))
    verdict = RequestBoundsFilter(5).on_request(ctx)
    assert isinstance(verdict, Answer)
    response = decode_exact(response_class(key, version), verdict.body)
    results = getattr(response, case.results_field)
    assert [case.entry_name(r) for r in results] == _names(12)
    for result in results:
        for error in case.result_errors(result):
            assert int(error.error_code) == INVALID_REQUEST
            message = getattr(error, "error_message", None)
            if message is not None:
                assert message == (
                    "request too large: 12 entries; limits.max_entries_per_request is 5"
                )


@pytest.mark.parametrize(("key", "version"), VERSIONS)
def test_over_four_times_the_bound_the_connection_is_closed_unread(
    key: int, version: int, no_decoding: list[str]
) -> None:
    ctx = context(key, version, CASES[key].request(version, _names(21)))
    verdict = RequestBoundsFilter(5).on_request(ctx)
    assert isinstance(verdict, Close)
    assert verdict.reason == "request too large"
    assert verdict.detail is not None and "21 entries" in verdict.detail
    assert no_decoding == []


def test_the_million_empty_names_frame_is_closed_without_walking_it(
    no_decoding: list[str],
) -> None:
    verdict = RequestBoundsFilter(5000).on_request(context_of(million_empty_names()))
    assert verdict == Close(
        "request too large",
        "DeleteTopics with 1048576 entries "
        "(limits.max_entries_per_request is 5000; closed over 4x)",
    )
    assert no_decoding == []


def _delete_records(partitions: int) -> Any:
    """DeleteRecords v2: one topic with this many partitions."""
    m = importlib.import_module(request_class(21, 2).__module__)
    parts = tuple(
        build(m.DeleteRecordsPartition, partition_index=i, offset=1) for i in range(partitions)
    )
    topic = build(m.DeleteRecordsTopic, name="t", partitions=parts)
    return build(m.DeleteRecordsRequest, topics=(topic,), timeout=5000)


def test_nested_elements_are_bounded_at_ten_per_entry() -> None:
    bounds = RequestBoundsFilter(5)  # 50 array elements in all
    assert bounds.on_request(context(21, 2, _delete_records(49))) == Forward()
    verdict = bounds.on_request(context(21, 2, _delete_records(60)))
    assert isinstance(verdict, Answer)
    response = decode_exact(response_class(21, 2), verdict.body)
    (topic,) = response.topics
    assert {int(p.error_code) for p in topic.partitions} == {INVALID_REQUEST}
    closed = bounds.on_request(context(21, 2, _delete_records(201)))
    assert isinstance(closed, Close)
    assert closed.detail is not None and "more than 200 array elements" in closed.detail


def test_a_short_body_is_not_walked(no_decoding: list[str]) -> None:
    # 5 partitions take 13 bytes each: a 70-byte body cannot hold 100 array elements.
    assert RequestBoundsFilter(10).on_request(context(21, 2, _delete_records(5))) == Forward()
    assert no_decoding == []


async def test_a_malformed_count_is_refused_as_undecodable(tmp_path: Path) -> None:
    frame = framed(request_header(19, 7, 1, "t"), b"\x80\x80\x80\x80\x80\x01")
    chain = proxy_chain(
        listeners=_NoListeners(),
        policy=lambda: None,
        facts=live_facts(FakeReader()),
        recorder=Records(tmp_path).recorder,
        legacy_error_code=44,
    )
    verdict = await settle(chain.on_request(context_of(frame)))
    assert isinstance(verdict, Close)
    assert verdict.reason == "cannot decode request"


async def test_the_chain_refuses_before_the_topic_policy_reads_anything(tmp_path: Path) -> None:
    reader = FakeReader()
    records = Records(tmp_path)
    policy = load_policy("version: 1\nrules:\n  - name: any\n    partitions: {max: 6}\n")
    chain = proxy_chain(
        listeners=_NoListeners(),
        policy=lambda: policy,
        facts=live_facts(reader),
        recorder=records.recorder,
        legacy_error_code=44,
        max_entries_per_request=5,
    )
    ctx = context(20, 6, CASES[20].request(6, _names(8)))
    verdict = await settle(chain.on_request(ctx))
    assert isinstance(verdict, Answer)
    assert reader.asked == []
    assert records.read() == []


class _NoListeners:
    def endpoint(self, node_id: int) -> tuple[str, int]:
        return "127.0.0.1", 9200 + node_id

    def ready(self, nodes: dict[int, tuple[str, int]]) -> bool:
        return True


ADMIN_VERSIONS = [
    (key, version)
    for key in sorted(BOUNDED_ADMIN_KEYS)
    for version in range(known_versions(key)[0], known_versions(key)[1] + 1)  # type: ignore[index]
]


@pytest.mark.parametrize(("key", "version"), ADMIN_VERSIONS)
def test_every_bounded_admin_api_has_a_countable_array_and_a_denial(key: int, version: int) -> None:
    with contextlib.suppress(CodecError):  # a null count: read, not refused as unreadable
        top_level_count(request_class(key, version), b"\x00" * 16)
    assert key in ANSWERABLE


def _create_acls(version: int, count: int) -> Any:
    m = importlib.import_module(request_class(30, version).__module__)
    creation = build(
        m.AclCreation,
        resource_type=2,
        resource_name="t",
        resource_pattern_type=3,
        principal="User:x",
        host="*",
        operation=2,
        permission_type=3,
    )
    return build(m.CreateAclsRequest, creations=(creation,) * count)


@pytest.mark.parametrize("version", [v for k, v in ADMIN_VERSIONS if k == 30])
def test_an_admin_request_over_the_bound_is_answered_then_closed(version: int) -> None:
    bounds = RequestBoundsFilter(5)
    assert bounds.on_request(context(30, version, _create_acls(version, 5))) == Forward()
    verdict = bounds.on_request(context(30, version, _create_acls(version, 12)))
    assert isinstance(verdict, Answer)
    answer = decode_exact(response_class(30, version), verdict.body)
    assert [int(r.error_code) for r in answer.results] == [INVALID_REQUEST] * 12
    assert answer.results[0].error_message == (
        "request too large: 12 entries; limits.max_entries_per_request is 5"
    )
    assert isinstance(bounds.on_request(context(30, version, _create_acls(version, 21))), Close)


@pytest.mark.parametrize("version", [v for k, v in ADMIN_VERSIONS if k == 43])
def test_elect_leaders_counts_its_topics_after_the_election_type(version: int) -> None:
    m = importlib.import_module(request_class(43, version).__module__)
    topics = tuple(build(m.TopicPartitions, topic=f"t{i}", partitions=(0,)) for i in range(8))
    request = build(m.ElectLeadersRequest, election_type=0, topic_partitions=topics, timeout=1000)
    verdict = RequestBoundsFilter(5).on_request(context(43, version, request))
    assert isinstance(verdict, Answer)
    answer = decode_exact(response_class(43, version), verdict.body)
    results = answer.replica_election_results
    assert [r.topic for r in results] == [f"t{i}" for i in range(8)]
    assert {int(p.error_code) for r in results for p in r.partition_result} == {INVALID_REQUEST}
    # Null: every partition. Nothing to count, so nothing refused.
    every = build(m.ElectLeadersRequest, election_type=0, topic_partitions=None, timeout=1000)
    assert RequestBoundsFilter(5).on_request(context(43, version, every)) == Forward()


@pytest.mark.parametrize("version", [0, 3, 4, 9, 12])
def test_a_metadata_request_naming_more_topics_than_the_element_bound_is_closed_unread(
    version: int, no_decoding: list[str]
) -> None:
    # The auto-create guard would decode it whole (2 us a name) and look every name up.
    m = importlib.import_module(request_class(3, version).__module__)
    fields = m.MetadataRequestTopic.__dataclass_fields__
    extra = {"topic_id": None} if "topic_id" in fields else {}
    topics = tuple(build(m.MetadataRequestTopic, name=n, **extra) for n in _names(51))
    request_fields = m.MetadataRequest.__dataclass_fields__
    flags = {
        k: False
        for k in (
            "allow_auto_topic_creation",
            "include_cluster_authorized_operations",
            "include_topic_authorized_operations",
        )
        if k in request_fields
    }
    request = build(m.MetadataRequest, topics=topics, **flags)
    over = RequestBoundsFilter(5).on_request(context(3, version, request))
    assert isinstance(over, Close) and over.detail is not None and "51 topics" in over.detail
    within = build(m.MetadataRequest, topics=topics[:50], **flags)
    assert RequestBoundsFilter(5).on_request(context(3, version, within)) == Forward()
