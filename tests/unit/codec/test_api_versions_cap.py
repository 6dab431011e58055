"""ApiVersions capping: the intersection with the proxy's ranges, unknown keys dropped."""

import importlib

import pytest

from harness.messages import build
from kafka_policy_proxy.codec.api_versions import (
    VERSION_CAPS,
    VERSION_FLOORS,
    cap_response,
    proxy_range,
    supports,
    unsupported_version_response,
)
from kafka_policy_proxy.codec.registry import decode_exact, encode, known_versions, response_class


def _response(version: int, entries: list[tuple[int, int, int]], error_code: int = 0) -> bytes:
    m = importlib.import_module(response_class(18, version).__module__)
    keys = tuple(
        build(m.ApiVersion, api_key=k, min_version=lo, max_version=hi) for k, lo, hi in entries
    )
    return encode(
        build(
            m.ApiVersionsResponse,
            error_code=error_code,
            api_keys=keys,
            throttle_time=0,
            supported_features=(),
            finalized_features_epoch=-1,
            finalized_features=(),
            zk_migration_ready=False,
        )
    )


@pytest.mark.parametrize("version", range(0, 5))
def test_cap_intersects_and_drops_unknown_keys(version: int) -> None:
    body = _response(version, [(0, 3, 13), (1, 4, 18), (3, 0, 13), (19, 2, 7), (9999, 0, 1)])
    out = decode_exact(response_class(18, version), cap_response(body, version))
    ranges = {e.api_key: (e.min_version, e.max_version) for e in out.api_keys}
    assert ranges == {
        0: (3, VERSION_CAPS[0]),
        1: (4, VERSION_CAPS[1]),
        3: (VERSION_FLOORS[3], 13),
        19: (2, 7),
    }


def test_broker_narrower_than_proxy_wins() -> None:
    body = _response(3, [(19, 5, 6)])
    out = decode_exact(response_class(18, 3), cap_response(body, 3))
    assert [(e.api_key, e.min_version, e.max_version) for e in out.api_keys] == [(19, 5, 6)]


def test_empty_intersection_removes_the_key() -> None:
    body = _response(3, [(0, 10, 13)])
    out = decode_exact(response_class(18, 3), cap_response(body, 3))
    assert out.api_keys == ()


def test_broker_kip511_answer_is_read_as_v0() -> None:
    body = _response(0, [(18, 0, 3)], error_code=35)
    out = decode_exact(response_class(18, 0), cap_response(body, 4))
    assert out.error_code.value == 35
    assert [(e.api_key, e.max_version) for e in out.api_keys] == [(18, 3)]


def test_unsupported_version_response_is_v0_with_our_range() -> None:
    out = decode_exact(response_class(18, 0), unsupported_version_response())
    assert out.error_code.value == 35
    assert [(e.api_key, e.min_version, e.max_version) for e in out.api_keys] == [
        (18, *known_versions(18))
    ]


def test_supports_follows_the_ranges() -> None:
    assert supports(0, 9) and not supports(0, 10)
    assert not supports(3, 3) and supports(3, 4)
    assert not supports(9999, 0)
    assert proxy_range(55) == (0, 1)
