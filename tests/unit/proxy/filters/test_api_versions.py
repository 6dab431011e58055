"""The ApiVersions filter: too-new requests answered by the proxy, broker ranges capped."""

from __future__ import annotations

import importlib
import struct

from harness.messages import build
from kafka_policy_proxy.codec.api_versions import VERSION_CAPS
from kafka_policy_proxy.codec.framing import framed
from kafka_policy_proxy.codec.registry import decode_exact, encode, response_class
from kafka_policy_proxy.proxy.filters.api import Answer, Forward
from kafka_policy_proxy.proxy.filters.api_versions import ApiVersionsFilter
from tests.unit.proxy.contexts import context, context_of, settle

UNSUPPORTED_VERSION = 35


def broker_response(version: int, entries: list[tuple[int, int, int]]) -> bytes:
    m = importlib.import_module(response_class(18, version).__module__)
    keys = tuple(
        build(m.ApiVersion, api_key=k, min_version=lo, max_version=hi) for k, lo, hi in entries
    )
    return encode(
        build(
            m.ApiVersionsResponse,
            error_code=0,
            api_keys=keys,
            throttle_time=0,
            supported_features=(),
            finalized_features_epoch=-1,
            finalized_features=(),
            zk_migration_ready=False,
        )
    )


def test_a_version_newer_than_the_proxy_knows_is_answered_by_the_proxy() -> None:
    # Version 99 of ApiVersions: the header is v1 for versions the proxy does not know.
    too_new = framed(struct.pack(">hhih", 18, 99, 2, 1), b"t")
    verdict = ApiVersionsFilter().on_request(context_of(too_new))
    assert isinstance(verdict, Answer)
    assert struct.unpack_from(">h", verdict.body)[0] == UNSUPPORTED_VERSION


async def test_the_broker_ranges_are_capped_and_unknown_keys_left_out() -> None:
    verdict = ApiVersionsFilter().on_request(context(18, 3))
    assert isinstance(verdict, Forward) and verdict.hook is not None
    body = broker_response(3, [(0, 3, 99), (9999, 0, 1)])
    out = decode_exact(response_class(18, 3), await settle(verdict.hook(body)))
    assert {e.api_key: (e.min_version, e.max_version) for e in out.api_keys} == {
        0: (3, VERSION_CAPS[0])
    }
