"""SASL passthrough interceptor: learns each connection's principal once the broker agrees."""

from __future__ import annotations

from collections.abc import Callable

import structlog

from codec.errors import CodecError
from codec.header import RequestHeader, request_body_offset
from codec.registry import decode_exact, request_class, response_class
from codec.sasl import SaslError
from proxy.connection import Action, ClientConnection, Forward
from proxy.sasl_principal import Authenticated, AuthenticationFailed, SaslPrincipalTracker

log = structlog.get_logger("proxy.authentication")

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36


class SaslObserver:
    """Reads the SASL messages a client and its broker exchange; never changes them."""

    api_keys = frozenset({SASL_HANDSHAKE, SASL_AUTHENTICATE})

    def __init__(self) -> None:
        self._trackers: dict[int, SaslPrincipalTracker] = {}

    def on_request(self, conn: ClientConnection, header: RequestHeader, frame: bytes) -> Action:
        """Feed the request to the tracker; read the broker's verdict from the response."""
        key, version = header.api_key, header.api_version
        tracker = self._trackers.get(conn.id)
        if tracker is None:
            tracker = self._trackers[conn.id] = SaslPrincipalTracker()
            conn.on_closed(lambda: self._trackers.pop(conn.id, None))
        request = decode_exact(
            request_class(key, version), frame, request_body_offset(frame, header)
        )
        try:
            if key == SASL_HANDSHAKE:
                tracker.handshake_request(request)
            else:
                tracker.authenticate_request(request)
        except SaslError as exc:
            # The proxy must know who the client is; what it cannot follow does not pass.
            raise CodecError(key, version, f"SASL: {exc}") from exc
        return Forward(frame, self._verdict(conn, tracker, key, version))

    def _verdict(
        self, conn: ClientConnection, tracker: SaslPrincipalTracker, key: int, version: int
    ) -> Callable[[bytes], bytes]:
        def read(body: bytes) -> bytes:
            response = decode_exact(response_class(key, version), body)
            outcome: Authenticated | AuthenticationFailed | None
            try:
                if key == SASL_HANDSHAKE:
                    outcome = tracker.handshake_response(response)
                else:
                    outcome = tracker.authenticate_response(response)
            except SaslError as exc:
                raise CodecError(key, version, f"SASL: {exc}") from exc
            if isinstance(outcome, Authenticated):
                conn.principal = outcome.principal
                conn.log = conn.log.bind(principal=outcome.principal)
                if outcome.principal_changed:
                    log.warning(
                        "re-authentication changed the principal",
                        conn=conn.id,
                        previous=outcome.previous_principal,
                        principal=outcome.principal,
                    )
                else:
                    log.info(
                        "authenticated",
                        conn=conn.id,
                        principal=outcome.principal,
                        mechanism=outcome.mechanism,
                    )
            elif isinstance(outcome, AuthenticationFailed):
                log.info(
                    "authentication failed",
                    conn=conn.id,
                    mechanism=outcome.mechanism,
                    claimed=outcome.claimed_principal,
                    error_code=outcome.error_code,
                )
            return body

        return read
