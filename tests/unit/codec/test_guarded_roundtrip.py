"""decode(encode(x)) == x for every guarded request and response class, in every kio version."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_policy_proxy.codec.guarded import GUARDED_API_KEYS, guarded_api
from kafka_policy_proxy.codec.metadata_request import METADATA, decode_metadata_request
from kafka_policy_proxy.codec.registry import encode, known_versions, request_class, response_class
from tests.unit.codec.kio_strategies import entities


def _cases() -> list[Any]:
    cases = []
    for key in sorted(GUARDED_API_KEYS | {METADATA}):
        bounds = known_versions(key)
        assert bounds is not None
        # Metadata responses belong to the address rewrite; only the request is ours.
        kinds = ("request",) if key == METADATA else ("request", "response")
        for version in range(bounds[0], bounds[1] + 1):
            for kind in kinds:
                cases.append(pytest.param(key, version, kind, id=f"{key}-v{version}-{kind}"))
    return cases


def test_every_kio_version_is_covered() -> None:
    assert {key: known_versions(key) for key in GUARDED_API_KEYS} == {
        19: (2, 7),
        20: (1, 6),
        21: (0, 2),
        33: (0, 2),
        37: (0, 3),
        44: (0, 1),
        45: (0, 1),
    }


@pytest.mark.parametrize(("key", "version", "kind"), _cases())
@settings(settings.get_profile("codec-roundtrip"))
@given(data=st.data())
def test_round_trip(key: int, version: int, kind: str, data: st.DataObject) -> None:
    cls = request_class(key, version) if kind == "request" else response_class(key, version)
    message = data.draw(entities(cls))
    body = encode(message)
    api = guarded_api(key)
    if api is None:
        decoded = decode_metadata_request(version, body)
    elif kind == "request":
        decoded = api.decode_request(version, body)
    else:
        decoded = api.decode_response(version, body)
    assert decoded == message
    assert encode(decoded) == body
