"""ApiVersions: the ranges the proxy can handle, and capping a broker's answer to them."""

from __future__ import annotations

import dataclasses
import functools
import struct
from typing import Any

from kafka_policy_proxy.codec.api_classes import api_class
from kafka_policy_proxy.codec.registry import decode_exact, encode, known_versions, response_class

PRODUCE = 0
FETCH = 1
METADATA = 3
SASL_HANDSHAKE = 17
API_VERSIONS = 18
ELECT_LEADERS = 43
DESCRIBE_QUORUM = 55
UNSUPPORTED_VERSION = 35

# Where the proxy accepts less than kio can decode, and why.
VERSION_CAPS: dict[int, int] = {
    PRODUCE: 9,  # v10+ responses may carry KIP-951 broker endpoints; below that, bytes pass as is
    FETCH: 15,  # likewise from v16
    DESCRIBE_QUORUM: 1,  # v2+ responses list the controllers' listener addresses
}
VERSION_FLOORS: dict[int, int] = {
    METADATA: 4,  # v0-3 always allow auto-creation, which the policy must be able to turn off
    SASL_HANDSHAKE: 1,  # v0 switches to raw SASL frames the proxy could not follow
    ELECT_LEADERS: 1,  # v0 has no top-level error: denying "all partitions" could not be said
}


def proxy_range(api_key: int) -> tuple[int, int] | None:
    """Return the (min, max) versions the proxy handles for an API key, or None.

    None for a key kio does not know or `API_CLASSES` does not classify: such a key is never
    advertised, and a request with it closes the connection.
    """
    known = known_versions(api_key)
    if known is None or api_class(api_key) is None:
        return None
    low = max(known[0], VERSION_FLOORS.get(api_key, known[0]))
    high = min(known[1], VERSION_CAPS.get(api_key, known[1]))
    return (low, high) if low <= high else None


def supports(api_key: int, api_version: int) -> bool:
    """Whether the proxy handles this API version (anything else must not reach a broker)."""
    span = proxy_range(api_key)
    return span is not None and span[0] <= api_version <= span[1]


def cap_response(body: bytes, api_version: int) -> bytes:
    """Intersect a broker's ApiVersions response with the proxy's ranges, dropping unknown keys."""
    return _capped(bytes(body), api_version)


# Every connection starts with ApiVersions, and a broker answers each request version with
# the same bytes (until its features change): decoding and re-encoding them once per distinct
# answer, not per connection, more than halves the proxy's CPU per new connection.
@functools.lru_cache(maxsize=64)
def _capped(body: bytes, api_version: int) -> bytes:
    (error_code,) = struct.unpack_from(">h", body) if len(body) >= 2 else (0,)
    # A broker that does not know the request version answers in v0 (KIP-511).
    version = 0 if error_code == UNSUPPORTED_VERSION else api_version
    response: Any = decode_exact(response_class(API_VERSIONS, version), body)
    kept = []
    for entry in response.api_keys:
        span = proxy_range(int(entry.api_key))
        if span is None:
            continue
        low = max(int(entry.min_version), span[0])
        high = min(int(entry.max_version), span[1])
        if low <= high:
            kept.append(
                dataclasses.replace(
                    entry,
                    min_version=type(entry.min_version)(low),
                    max_version=type(entry.max_version)(high),
                )
            )
    return encode(dataclasses.replace(response, api_keys=tuple(kept)))


def unsupported_version_response() -> bytes:
    """A v0 ApiVersions body with UNSUPPORTED_VERSION and the ApiVersions range (KIP-511)."""
    from kio.schema.api_versions.v0.response import ApiVersion, ApiVersionsResponse
    from kio.schema.errors import ErrorCode
    from kio.static.primitive import i16

    span = proxy_range(API_VERSIONS)
    assert span is not None
    entry = ApiVersion(
        api_key=i16(API_VERSIONS), min_version=i16(span[0]), max_version=i16(span[1])
    )
    return encode(ApiVersionsResponse(error_code=ErrorCode(UNSUPPORTED_VERSION), api_keys=(entry,)))
