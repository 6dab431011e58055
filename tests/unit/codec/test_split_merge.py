"""Split a batch into forwarded and denied topics, then merge: every version of every API."""

from __future__ import annotations

from typing import Any

import pytest

from kafka_policy_proxy.codec.guarded import GUARDED_API_KEYS, guarded_api
from kafka_policy_proxy.codec.registry import encode
from kafka_policy_proxy.codec.violations import has_error_message
from tests.unit.codec.guarded_cases import CASES, ApiCase

NAMES = ["t0", "t1", "t2", "t3", "t4", "t5"]
PATTERNS = {
    "interleaved": {1, 3, 4},
    "all-allowed": set(),
    "all-denied": set(range(len(NAMES))),
    "first-only": {0},
}


def _params() -> list[Any]:
    return [
        pytest.param(key, version, pattern, id=f"{key}-v{version}-{pattern}")
        for key in sorted(GUARDED_API_KEYS)
        for version in guarded_api(key).versions()  # type: ignore[union-attr]
        for pattern in PATTERNS
    ]


def _expected_error(errors_holder: Any, message: str, legacy: int) -> tuple[int, str | None]:
    if has_error_message(type(errors_holder)):
        return 44, message
    if errors_holder.__api_key__ == 21:
        return 44, None  # DeleteRecords: POLICY_VIOLATION whatever legacy_error_code says
    return legacy, None


def _run(
    case: ApiCase, version: int, names: list[str], denied: set[int], legacy: int = -1
) -> tuple[Any, Any, Any]:
    api = guarded_api(case.key)
    assert api is not None
    request = api.decode_request(version, encode(case.request(version, names)))
    plan = api.split(request, {i: f"no {names[i]}" for i in denied}, legacy_error_code=legacy)
    broker = None if plan.forward is None else case.broker_answer(plan.forward, seed=version)
    merged = api.decode_response(version, api.merge(plan, broker))
    return request, plan, merged


@pytest.mark.parametrize(("key", "version", "pattern"), _params())
def test_split_and_merge(key: int, version: int, pattern: str) -> None:
    case = CASES[key]
    denied = PATTERNS[pattern]
    request, plan, merged = _run(case, version, NAMES, denied)
    api = guarded_api(key)
    assert api is not None

    allowed = [n for i, n in enumerate(NAMES) if i not in denied]
    if allowed:
        assert plan.forward is not None
        assert [case.entry_name(e) for e in api.entries(plan.forward)] == allowed
        # Everything but the topic array reaches the broker unchanged (validate_only...).
        entries_field = case.entries_for(version)
        for field, value in vars_of(request).items():
            if field != entries_field:
                assert getattr(plan.forward, field) == value
    else:
        assert plan.forward is None

    results = getattr(merged, case.results_field)
    assert [case.entry_name(r) for r in results] == NAMES
    for index, result in enumerate(results):
        for holder in case.result_errors(result):
            if index in denied:
                code, message = _expected_error(holder, f"no {NAMES[index]}", -1)
                assert holder.error_code == code
                assert getattr(holder, "error_message", None) == message
            else:
                assert holder.error_code == 0
    if allowed:
        assert merged.throttle_time.total_seconds() == pytest.approx(0.007)


def vars_of(message: Any) -> dict[str, Any]:
    """The fields of a kio message."""
    return {name: getattr(message, name) for name in message.__dataclass_fields__}


@pytest.mark.parametrize("key", sorted(GUARDED_API_KEYS))
def test_legacy_error_code_is_configurable(key: int) -> None:
    """Versions without a message field get -1 by default and 44 when configured
    (DeleteRecords always 44)."""
    case = CASES[key]
    api = guarded_api(key)
    assert api is not None
    for version in api.versions():
        for legacy in (-1, 44):
            _, _, merged = _run(case, version, ["a", "b"], {1}, legacy)
            denied_result = getattr(merged, case.results_field)[1]
            for holder in case.result_errors(denied_result):
                expected = _expected_error(holder, "no b", legacy)
                assert (holder.error_code, getattr(holder, "error_message", None)) == expected


def test_message_field_exists_except_in_the_kip_201_rows() -> None:
    """Only DeleteTopics v1-4 and every DeleteRecords version lack an error-message field."""
    no_message = {
        (key, version)
        for key in GUARDED_API_KEYS
        for version in guarded_api(key).versions()  # type: ignore[union-attr]
        if not _has_message(key, version)
    }
    assert no_message == {(20, 1), (20, 2), (20, 3), (20, 4), (21, 0), (21, 1), (21, 2)}


def _has_message(key: int, version: int) -> bool:
    _, _, merged = _run(CASES[key], version, ["a"], {0})
    holder = CASES[key].result_errors(getattr(merged, CASES[key].results_field)[0])[0]
    return hasattr(holder, "error_message")


def test_everything_denied_never_needs_the_broker() -> None:
    api = guarded_api(19)
    assert api is not None
    request = CASES[19].request(7, ["a", "b"])
    plan = api.split(request, {0: "x", 1: "y"})
    assert plan.forward is None
    merged = api.decode_response(7, api.merge(plan, None))
    assert [(t.name, t.error_code, t.error_message) for t in merged.topics] == [
        ("a", 44, "x"),
        ("b", 44, "y"),
    ]


def test_nothing_denied_forwards_the_request_itself() -> None:
    api = guarded_api(19)
    assert api is not None
    request = CASES[19].request(7, ["a", "b"])
    assert api.split(request, {}).forward is request


def test_merge_needs_the_broker_answer_when_something_was_forwarded() -> None:
    api = guarded_api(19)
    assert api is not None
    plan = api.split(CASES[19].request(7, ["a", "b"]), {0: "x"})
    with pytest.raises(ValueError, match="broker response"):
        api.merge(plan, None)


def test_merge_refuses_a_response_of_another_version() -> None:
    api = guarded_api(19)
    assert api is not None
    plan = api.split(CASES[19].request(7, ["a", "b"]), {0: "x"})
    other = CASES[19].broker_answer(CASES[19].request(6, ["b"]))
    with pytest.raises(ValueError, match="expected v7"):
        api.merge(plan, other)


def test_unexpected_broker_results_are_kept_after_the_requested_ones() -> None:
    api = guarded_api(37)
    assert api is not None
    case = CASES[37]
    plan = api.split(case.request(3, ["a", "b"]), {0: "x"})
    broker = case.broker_answer(case.request(3, ["zzz", "b"]))
    merged = api.decode_response(3, api.merge(plan, broker))
    assert [r.name for r in merged.results] == ["a", "b", "zzz"]


def test_denying_an_index_outside_the_request_is_a_programming_error() -> None:
    api = guarded_api(44)
    assert api is not None
    request = CASES[44].request(1, ["broker:1", "t"])
    with pytest.raises(ValueError, match=r"\[5\]"):
        api.split(request, {5: "no"})


@pytest.mark.parametrize("key", [33, 44])
def test_broker_resources_are_their_own_items_and_can_be_denied(key: int) -> None:
    api = guarded_api(key)
    assert api is not None
    case = CASES[key]
    names = ["t0", "broker:1", "t1", "broker:"]
    for version in api.versions():
        request = case.request(version, names)
        resources = api.resource_items(request)
        assert [(r.index, r.resource_type, r.name) for r in resources] == [(1, 4, "1"), (3, 4, "")]
        assert all(r.replace is (key == 33) for r in resources)
        plan = api.split(request, {3: "no default"})
        assert plan.forward is not None
        assert plan.forward.resources == request.resources[:3]
        merged = api.decode_response(version, api.merge(plan, case.broker_answer(plan.forward)))
        assert [case.entry_name(r) for r in merged.responses] == names
        assert [r.error_code for r in merged.responses] == [0, 0, 0, 44]


@pytest.mark.parametrize("key", [33, 44])
def test_broker_resources_are_forwarded_with_the_topics_allowed(key: int) -> None:
    api = guarded_api(key)
    assert api is not None
    case = CASES[key]
    names = ["t0", "broker:1", "t1", "broker:"]
    for version in api.versions():
        request = case.request(version, names)
        assert [item.topic for item in api.topic_items(request)] == ["t0", "t1"]
        assert [item.index for item in api.topic_items(request)] == [0, 2]
        plan = api.split(request, {0: "a", 2: "b"})
        assert plan.forward is not None
        assert plan.forward.resources == (request.resources[1], request.resources[3])
        merged = api.decode_response(version, api.merge(plan, case.broker_answer(plan.forward)))
        assert [case.entry_name(r) for r in merged.responses] == names
        assert [r.error_code for r in merged.responses] == [44, 0, 44, 0]
