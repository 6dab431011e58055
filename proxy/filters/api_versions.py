"""ApiVersions filter: clients learn only the versions the proxy can handle."""

from __future__ import annotations

from kafka_policy_proxy.codec.api_versions import (
    cap_response,
    proxy_range,
    unsupported_version_response,
)
from kafka_policy_proxy.codec.header import API_VERSIONS
from kafka_policy_proxy.proxy.filters.api import Answer, Filter, Forward, RequestContext, Verdict


class ApiVersionsFilter(Filter):
    """Answers too-new ApiVersions requests itself (KIP-511) and caps the broker's ranges."""

    api_keys = frozenset({API_VERSIONS})

    def on_request(self, ctx: RequestContext) -> Verdict:
        """Answer UNSUPPORTED_VERSION to a version the proxy does not know; else cap the answer."""
        span = proxy_range(API_VERSIONS)
        version = ctx.api_version
        if span is None or version > span[1]:
            return Answer(unsupported_version_response())
        return Forward(lambda body: cap_response(body, version))
