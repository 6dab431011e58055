"""kpp_requests: its labels come from bounded sets, whatever keys and versions clients send."""

from __future__ import annotations

import random

from prometheus_client import REGISTRY

from kafka_policy_proxy.codec.api_versions import proxy_range
from kafka_policy_proxy.proxy import metrics
from kafka_policy_proxy.proxy.metrics import count_request


def label_sets() -> set[tuple[str, str, str]]:
    return {
        (s.labels["api"], s.labels["api_key"], s.labels["api_version"])
        for family in REGISTRY.collect()
        if family.name == "kpp_requests"
        for s in family.samples
        if s.name == "kpp_requests_total"
    }


def value(api: str, key: str, version: str) -> float:
    got = REGISTRY.get_sample_value(
        "kpp_requests_total", {"api": api, "api_key": key, "api_version": version}
    )
    return got or 0.0


def test_random_versions_and_unknown_keys_add_no_label_sets() -> None:
    span = proxy_range(18)
    assert span is not None
    for version in range(span[0], span[1] + 1):
        count_request(18, version)
    count_request(18, span[1] + 1)
    count_request(9999, 0)
    before, cached = label_sets(), len(metrics._request_counters)
    other_versions = value("ApiVersions", "18", "other")
    other_keys = value("other", "other", "other")
    rng = random.Random(31)
    for _ in range(32_000):
        count_request(18, rng.randrange(span[1] + 1, 32_768))
    for _ in range(3_000):
        count_request(rng.choice([-1, 200, 1000, 32_767, rng.randrange(93, 32_768)]), 0)
    assert label_sets() == before
    assert len(metrics._request_counters) == cached
    assert value("ApiVersions", "18", "other") == other_versions + 32_000
    assert value("other", "other", "other") == other_keys + 3_000


def test_a_known_version_keeps_its_own_label() -> None:
    before = value("CreateTopics", "19", "7")
    count_request(19, 7)
    assert value("CreateTopics", "19", "7") == before + 1
