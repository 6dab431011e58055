"""Override rewrites: allowed entries are forwarded with the policy's values, in every version."""

from __future__ import annotations

from typing import Any

import pytest

from kafka_policy_proxy.codec.guarded import Rewrite, guarded_api
from kafka_policy_proxy.codec.registry import encode
from tests.unit.codec.guarded_cases import CASES

CREATE_TOPICS, ALTER_CONFIGS, INCREMENTAL = 19, 33, 44
NAMES = ["t0", "t1", "t2"]
REWRITE = Rewrite(
    partitions=12, configs=(("retention.ms", "604800000"), ("min.insync.replicas", "2"))
)


def _forwarded(key: int, version: int, denied: dict[int, str], rewrites: dict[int, Rewrite]) -> Any:
    api = guarded_api(key)
    assert api is not None
    request = api.decode_request(version, encode(CASES[key].request(version, NAMES)))
    plan = api.split(request, denied, rewrites=rewrites)
    assert plan.forward is not None
    # What goes on the wire decodes as the broker will read it.
    return api.decode_request(version, encode(plan.forward))


@pytest.mark.parametrize("version", list(guarded_api(CREATE_TOPICS).versions()))  # type: ignore[union-attr]
def test_a_create_gets_its_capped_count_and_its_configs_replaced_or_added(version: int) -> None:
    forwarded = _forwarded(CREATE_TOPICS, version, {2: "no"}, {1: REWRITE, 2: REWRITE})
    assert [t.name for t in forwarded.topics] == ["t0", "t1"]
    untouched, rewritten = forwarded.topics
    assert untouched.num_partitions == 3
    assert [(c.name, c.value) for c in untouched.configs] == [("retention.ms", "1000")]
    assert rewritten.num_partitions == 12
    assert rewritten.replication_factor == 1
    assert [(c.name, c.value) for c in rewritten.configs] == [
        ("retention.ms", "604800000"),
        ("min.insync.replicas", "2"),
    ]


def test_an_incremental_change_gets_the_values_it_named_and_nothing_added() -> None:
    for version in guarded_api(INCREMENTAL).versions():  # type: ignore[union-attr]
        forwarded = _forwarded(INCREMENTAL, version, {}, {0: REWRITE})
        first, second, _ = forwarded.resources
        assert [(c.name, c.value) for c in first.configs] == [("retention.ms", "604800000")]
        assert [(c.name, c.value) for c in second.configs] == [("retention.ms", "1000")]


def test_a_full_replacement_gets_the_values_it_left_out_added() -> None:
    for version in guarded_api(ALTER_CONFIGS).versions():  # type: ignore[union-attr]
        forwarded = _forwarded(ALTER_CONFIGS, version, {}, {0: REWRITE})
        first, second, _ = forwarded.resources
        assert [(c.name, c.value) for c in first.configs] == [
            ("retention.ms", "604800000"),
            ("min.insync.replicas", "2"),
        ]
        assert [(c.name, c.value) for c in second.configs] == [("retention.ms", "1000")]


def test_without_rewrites_or_denials_the_request_is_forwarded_as_it_came() -> None:
    api = guarded_api(CREATE_TOPICS)
    assert api is not None
    request = api.decode_request(7, encode(CASES[CREATE_TOPICS].request(7, NAMES)))
    assert api.split(request, {}).forward is request
    assert api.split(request, {}, rewrites={0: REWRITE}).forward is not request


def test_an_incremental_removal_keeps_its_null_value() -> None:
    api = guarded_api(INCREMENTAL)
    assert api is not None
    request = api.decode_request(1, encode(CASES[INCREMENTAL].request(1, NAMES)))
    entry = request.resources[0]
    removal = entry.configs[0].__class__(name="retention.ms", config_operation=1, value=None)
    changed = api.rewrite(
        type(entry)(resource_type=entry.resource_type, resource_name="t0", configs=(removal,)),
        REWRITE,
    )
    assert changed.configs[0].value is None


def test_apis_that_are_never_overridden_refuse_a_rewrite() -> None:
    api = guarded_api(20)
    assert api is not None
    with pytest.raises(ValueError, match="cannot be rewritten"):
        api.rewrite(object(), REWRITE)
