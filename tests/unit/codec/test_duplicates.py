"""Repeated topics keep the broker's semantics, and a denied topic never slips through a copy."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from harness.messages import build
from kafka_policy_proxy.codec.guarded import guarded_api
from kafka_policy_proxy.codec.guarded.base import element_class
from kafka_policy_proxy.codec.registry import request_class, response_class
from tests.unit.codec.guarded_cases import CASES

INVALID_REQUEST = 42


def _answer(key: int, version: int, entries: list[tuple[str, int]]) -> Any:
    """A broker answer with these (name, error code) results, other fields as in CASES."""
    case = CASES[key]
    cls = response_class(key, version)
    result_cls = element_class(cls, case.results_field)
    request = case.request(version, [name for name, _ in entries])
    results = []
    for entry, (_, code) in zip(case_entries(key, request), entries, strict=True):
        result = case.make_result(result_cls, entry)
        results.append(_with_code(result, code))
    return build(
        cls,
        throttle_time=0,
        error_code=0,
        error_message=None,
        **{case.results_field: tuple(results)},
    )


def case_entries(key: int, request: Any) -> Any:
    api = guarded_api(key)
    assert api is not None
    return api.entries(request)


def _with_code(result: Any, code: int) -> Any:
    error = ErrorCode(code)
    if hasattr(result, "partitions"):
        partitions = tuple(dataclasses.replace(p, error_code=error) for p in result.partitions)
        return dataclasses.replace(result, partitions=partitions)
    return dataclasses.replace(result, error_code=error)


def _merged(
    key: int,
    version: int,
    names: list[str],
    denied: dict[int, str],
    broker: list[tuple[str, int]] | None,
) -> tuple[Any, Any]:
    api = guarded_api(key)
    assert api is not None
    plan = api.split(CASES[key].request(version, names), denied)
    answer = None if broker is None else _answer(key, version, broker)
    merged = api.decode_response(version, api.merge(plan, answer))
    return plan, getattr(merged, CASES[key].results_field)


def _codes(key: int, results: Any) -> list[tuple[str, list[int]]]:
    case = CASES[key]
    return [(case.entry_name(r), [h.error_code for h in case.result_errors(r)]) for r in results]


def test_a_denied_copy_denies_every_copy_and_is_answered_once_where_the_broker_answers_once() -> (
    None
):
    for key in (19, 37, 20, 21):
        api = guarded_api(key)
        assert api is not None
        for version in api.versions():
            plan, results = _merged(key, version, ["a", "b", "a"], {2: "no a"}, [("b", 0)])
            assert plan.forward is not None
            assert [CASES[key].entry_name(e) for e in api.entries(plan.forward)] == ["b"]
            assert dict(plan.denied) == {0: "no a", 2: "no a"}
            assert [name for name, _ in _codes(key, results)] == ["a", "b"]


def test_a_denied_copy_is_answered_per_copy_where_the_broker_answers_each_copy() -> None:
    for key in (33, 44, 45):
        api = guarded_api(key)
        assert api is not None
        for version in api.versions():
            plan, results = _merged(key, version, ["a", "b", "a"], {0: "no a"}, [("b", 0)])
            assert plan.forward is not None
            assert [CASES[key].entry_name(e) for e in api.entries(plan.forward)] == ["b"]
            assert [name for name, _ in _codes(key, results)] == ["a", "b", "a"]
            assert all(
                code == 44 for name, codes in _codes(key, results) if name == "a" for code in codes
            )


def test_allowed_duplicates_are_forwarded_and_the_brokers_single_answer_kept() -> None:
    """CreateTopics: the broker refuses a repeated name once with INVALID_REQUEST."""
    plan, results = _merged(
        19, 7, ["a", "b", "a", "c"], {3: "no c"}, [("b", 0), ("a", INVALID_REQUEST)]
    )
    assert plan.forward is not None
    assert [t.name for t in plan.forward.topics] == ["a", "b", "a"]
    assert _codes(19, results) == [("a", [INVALID_REQUEST]), ("b", [0]), ("c", [44])]


def test_allowed_duplicate_config_resources_keep_one_answer_per_copy() -> None:
    """ConfigAdminManager refuses each copy of a repeated resource, in request order."""
    _, results = _merged(
        44, 1, ["a", "x", "a"], {1: "no x"}, [("a", INVALID_REQUEST), ("a", INVALID_REQUEST)]
    )
    assert _codes(44, results) == [("a", [INVALID_REQUEST]), ("x", [44]), ("a", [INVALID_REQUEST])]


def test_denied_delete_records_copies_answer_every_distinct_partition_once() -> None:
    api = guarded_api(21)
    assert api is not None
    topic_cls = element_class(request_class(21, 2), "topics")
    partition_cls = element_class(topic_cls, "partitions")

    def topic(*partitions: int) -> Any:
        return build(
            topic_cls,
            name="a",
            partitions=tuple(build(partition_cls, partition_index=p, offset=1) for p in partitions),
        )

    request = build(request_class(21, 2), topics=(topic(0, 1), topic(1, 2)), timeout=1)
    plan = api.split(request, {1: "no"})
    assert plan.forward is None
    (result,) = api.decode_response(2, api.merge(plan, None)).topics
    assert [(p.partition_index, p.low_watermark, p.error_code) for p in result.partitions] == [
        (0, -1, 44),
        (1, -1, 44),
        (2, -1, 44),
    ]


def test_delete_topics_v6_matches_shuffled_results_by_name_or_id() -> None:
    api = guarded_api(20)
    assert api is not None
    state_cls = element_class(request_class(20, 6), "topics")
    result_cls = element_class(response_class(20, 6), "responses")
    id_a, id_b, id_c = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    topics = (
        build(state_cls, name=None, topic_id=id_a),
        build(state_cls, name="b", topic_id=None),
        build(state_cls, name=None, topic_id=id_c),
    )
    request = build(request_class(20, 6), topics=topics, timeout=1)
    plan = api.split(request, {2: "no c"})
    # The broker answers with the resolved name and id, in shuffled order.
    answer = build(
        response_class(20, 6),
        throttle_time=0,
        responses=(
            build(result_cls, name="b", topic_id=id_b, error_code=0, error_message=None),
            build(result_cls, name="a", topic_id=id_a, error_code=0, error_message=None),
        ),
    )
    merged = api.decode_response(6, api.merge(plan, answer)).responses
    assert [(r.name, r.topic_id, r.error_code, r.error_message) for r in merged] == [
        ("a", id_a, 0, None),
        ("b", id_b, 0, None),
        (None, id_c, 44, "no c"),
    ]


def test_delete_topics_v6_same_id_twice_is_one_topic() -> None:
    api = guarded_api(20)
    assert api is not None
    state_cls = element_class(request_class(20, 6), "topics")
    topic_id = uuid.uuid4()
    topics = (
        build(state_cls, name=None, topic_id=topic_id),
        build(state_cls, name=None, topic_id=topic_id),
    )
    plan = api.split(build(request_class(20, 6), topics=topics, timeout=1), {1: "no"})
    assert plan.forward is None
    assert dict(plan.denied) == {0: "no", 1: "no"}
    assert len(api.decode_response(6, api.merge(plan, None)).responses) == 1


def test_alter_configs_answers_repeated_resources_itself_because_the_broker_never_does() -> None:
    """Kafka 4.1.1 drops its own AlterConfigs response when a resource repeats (any version)."""
    api = guarded_api(33)
    assert api is not None
    case = CASES[33]
    names = ["b", "c", "b", "broker:1", "broker:1", "d"]
    for version in api.versions():
        plan = api.split(case.request(version, names), {5: "no d"})
        assert plan.forward is not None
        assert [case.entry_name(e) for e in plan.forward.resources] == ["c"]
        assert dict(plan.refused) == {
            i: "Each resource must appear at most once." for i in (0, 2, 3, 4)
        }
        assert dict(plan.denied) == {5: "no d"}
        merged = api.decode_response(version, api.merge(plan, case.broker_answer(plan.forward)))
        assert [(case.entry_name(r), r.error_code) for r in merged.responses] == [
            ("b", INVALID_REQUEST),
            ("c", 0),
            ("b", INVALID_REQUEST),
            ("broker:1", INVALID_REQUEST),
            ("broker:1", INVALID_REQUEST),
            ("d", 44),
        ]


def test_incremental_alter_configs_forwards_repeated_resources_for_the_broker_to_refuse() -> None:
    api = guarded_api(44)
    assert api is not None
    request = CASES[44].request(1, ["b", "c", "b"])
    plan = api.split(request, {})
    assert plan.forward is request
    assert not plan.refused
