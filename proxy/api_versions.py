"""ApiVersions interceptor: clients learn only the versions the proxy can handle."""

from __future__ import annotations

from codec.api_versions import cap_response, proxy_range, unsupported_version_response
from codec.header import API_VERSIONS, RequestHeader
from proxy.connection import Action, ClientConnection, Forward, Reply


class ApiVersionsInterceptor:
    """Answers too-new ApiVersions requests itself (KIP-511) and caps the broker's ranges."""

    api_keys = frozenset({API_VERSIONS})

    def on_request(self, conn: ClientConnection, header: RequestHeader, frame: bytes) -> Action:
        """Reply UNSUPPORTED_VERSION to a version the proxy does not know; else cap the answer."""
        span = proxy_range(API_VERSIONS)
        if span is None or header.api_version > span[1]:
            return Reply(unsupported_version_response())
        version = header.api_version
        return Forward(frame, lambda body: cap_response(body, version))
