"""SASL principal capture: learns each connection's principal once the broker agrees."""

from __future__ import annotations

import structlog

from codec.errors import CodecError
from codec.registry import decode_exact, request_class, response_class
from codec.sasl import SaslError
from proxy.filter import Filter, Forward, HookResult, RequestContext, ResponseHook, WithPrincipal
from proxy.sasl_principal import Authenticated, AuthenticationFailed, SaslPrincipalTracker

log = structlog.get_logger("proxy.authentication")

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36


class PrincipalCaptureFilter(Filter):
    """Reads the SASL messages a client and its broker exchange; never changes them."""

    api_keys = frozenset({SASL_HANDSHAKE, SASL_AUTHENTICATE})

    def __init__(self) -> None:
        self._trackers: dict[int, SaslPrincipalTracker] = {}

    def on_request(self, ctx: RequestContext) -> Forward:
        """Feed the request to the tracker; read the broker's verdict from the response."""
        key, version = ctx.api_key, ctx.api_version
        tracker = self._trackers.get(ctx.connection_id)
        if tracker is None:
            tracker = self._trackers[ctx.connection_id] = SaslPrincipalTracker()
        request = decode_exact(request_class(key, version), ctx.frame, ctx.body_offset())
        try:
            if key == SASL_HANDSHAKE:
                tracker.handshake_request(request)
            else:
                tracker.authenticate_request(request)
        except SaslError as exc:
            # The proxy must know who the client is; what it cannot follow does not pass.
            raise CodecError(key, version, f"SASL: {exc}") from exc
        return Forward(self._verdict(ctx.connection_id, tracker, key, version))

    def on_close(self, connection_id: int) -> None:
        """Forget the connection's SASL exchange."""
        self._trackers.pop(connection_id, None)

    def _verdict(
        self, conn: int, tracker: SaslPrincipalTracker, key: int, version: int
    ) -> ResponseHook:
        def read(body: bytes) -> HookResult:
            response = decode_exact(response_class(key, version), body)
            outcome: Authenticated | AuthenticationFailed | None
            try:
                if key == SASL_HANDSHAKE:
                    outcome = tracker.handshake_response(response)
                else:
                    outcome = tracker.authenticate_response(response)
            except SaslError as exc:
                raise CodecError(key, version, f"SASL: {exc}") from exc
            if isinstance(outcome, AuthenticationFailed):
                log.info(
                    "authentication failed",
                    conn=conn,
                    mechanism=outcome.mechanism,
                    claimed=outcome.claimed_principal,
                    error_code=outcome.error_code,
                )
            if not isinstance(outcome, Authenticated):
                return body
            if outcome.principal_changed:
                log.warning(
                    "re-authentication changed the principal",
                    conn=conn,
                    previous=outcome.previous_principal,
                    principal=outcome.principal,
                )
            else:
                log.info(
                    "authenticated",
                    conn=conn,
                    principal=outcome.principal,
                    mechanism=outcome.mechanism,
                )
            return WithPrincipal(body, outcome.principal)

        return read
