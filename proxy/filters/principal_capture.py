"""SASL principal capture: learns each connection's principal once the broker agrees.

It also keeps requests that change the cluster (and Metadata, which can create topics) away
from a connection that has not authenticated: one whose SASL exchange has started but not
succeeded, or one on a listener whose broker is known to want SASL (a handshake succeeded
there) that never authenticated. A broker closes a connection that sends a non-SASL request
mid-exchange; so does the proxy, before any judgement, so no decision is ever made for
`User:ANONYMOUS` on such a connection. The refusal is logged as a warning under
`proxy.authentication`, naming the connection, client, listener and API, and audited as one
denied record with no principal (`decision_log.refusal_record`).
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from kafka_policy_proxy.codec.errors import CodecError, api_name
from kafka_policy_proxy.codec.guarded import GUARDED_API_KEYS
from kafka_policy_proxy.codec.prescan import decode_untrusted
from kafka_policy_proxy.codec.registry import decode_exact, request_class, response_class
from kafka_policy_proxy.codec.sasl import SaslError
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.proxy.audit.recorder import DecisionRecorder
from kafka_policy_proxy.proxy.filters.api import (
    Close,
    Filter,
    Forward,
    HookResult,
    RequestContext,
    ResponseHook,
    WithPrincipal,
)
from kafka_policy_proxy.proxy.identity.sasl import (
    Authenticated,
    AuthenticationFailed,
    SaslPrincipalTracker,
)

log = structlog.get_logger("proxy.authentication")

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
METADATA = 3
SASL_KEYS = frozenset({SASL_HANDSHAKE, SASL_AUTHENTICATE})
# Requests that change the cluster, or may (Metadata auto-creation), judged as some principal.
GATED_KEYS = GUARDED_API_KEYS | {METADATA}
NOT_AUTHENTICATED = "sent before SASL authentication completed"


class PrincipalCaptureFilter(Filter):
    """Reads the SASL messages a client and its broker exchange; never changes them."""

    api_keys = SASL_KEYS | GATED_KEYS

    def __init__(
        self,
        policy: Callable[[], CompiledPolicy | None],
        recorder: DecisionRecorder,
        principal_claim: str = "sub",
    ) -> None:
        self._policy = policy
        self._recorder = recorder
        self._principal_claim = principal_claim  # the JWT claim of an OAUTHBEARER principal
        self._trackers: dict[int, SaslPrincipalTracker] = {}
        # Listeners where a broker accepted a SaslHandshake: their broker wants SASL.
        self._sasl_listeners: set[str] = set()

    def on_request(self, ctx: RequestContext) -> Forward | Close:
        """Feed SASL requests to the tracker; close on a gated request before authentication."""
        key, version = ctx.api_key, ctx.api_version
        if key not in SASL_KEYS:
            return self._gate(ctx)
        tracker = self._trackers.get(ctx.connection_id)
        if tracker is None:
            tracker = self._trackers[ctx.connection_id] = SaslPrincipalTracker(
                self._principal_claim
            )
        request = decode_untrusted(request_class(key, version), ctx.frame, ctx.body_offset())
        try:
            if key == SASL_HANDSHAKE:
                tracker.handshake_request(request)
            else:
                tracker.authenticate_request(request)
        except SaslError as exc:
            # The proxy must know who the client is; what it cannot follow does not pass.
            raise CodecError(key, version, f"SASL: {exc}") from exc
        return Forward(self._verdict(ctx, tracker, key, version))

    def on_close(self, connection_id: int) -> None:
        """Forget the connection's SASL exchange."""
        self._trackers.pop(connection_id, None)

    def _gate(self, ctx: RequestContext) -> Forward | Close:
        """Forward, unless the connection has not finished authenticating where it must."""
        tracker = self._trackers.get(ctx.connection_id)
        if tracker is not None and tracker.authenticated:
            return Forward()
        if tracker is None and ctx.listener not in self._sasl_listeners:
            return Forward()
        state = "never started" if tracker is None else tracker.state
        api = api_name(ctx.api_key)
        # The audit log shows the refusal too; without a policy file there is no revision.
        policy = self._policy()
        revision = "" if policy is None else policy.revision
        decision_id = self._recorder.record_refusal(ctx, revision, state)
        log.warning(
            "request refused: " + NOT_AUTHENTICATED,
            conn=ctx.connection_id,
            decision_id=decision_id,
            client=ctx.client_address,
            listener=ctx.listener,
            api=api,
            api_key=ctx.api_key,
            sasl_state=state,
        )
        return Close(NOT_AUTHENTICATED, f"{api} while the SASL exchange is {state}")

    def _verdict(
        self, ctx: RequestContext, tracker: SaslPrincipalTracker, key: int, version: int
    ) -> ResponseHook:
        conn = ctx.connection_id

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
            if key == SASL_HANDSHAKE and outcome is None:
                self._sasl_listeners.add(ctx.listener)
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
