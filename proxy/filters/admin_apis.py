"""Admin API filter: cluster and security mutations are judged by `admin_apis`, denied by default.

A denied request is answered by the proxy with CLUSTER_AUTHORIZATION_FAILED on every entry;
where no answer can be built (inter-broker and controller-only APIs), the connection is closed,
as a broker does for an API it does not serve. The broker never sees a denied request.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from kafka_policy_proxy.codec.admin_denials import denial_response
from kafka_policy_proxy.codec.api_classes import API_CLASSES, CLUSTER_MUTATIONS
from kafka_policy_proxy.policy.admin_apis import AdminRequest
from kafka_policy_proxy.policy.decision_ids import cite
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.judge import judge_admin
from kafka_policy_proxy.proxy.audit.recorder import DecisionRecorder, Written
from kafka_policy_proxy.proxy.filters.api import (
    Answer,
    Close,
    Filter,
    Forward,
    RequestContext,
    Verdict,
)
from kafka_policy_proxy.proxy.filters.topic_requests import policy_principal


class AdminApiFilter(Filter):
    """Forwards an allowed admin API call; answers or refuses a denied one."""

    api_keys = CLUSTER_MUTATIONS

    def __init__(
        self, policy: Callable[[], CompiledPolicy | None], recorder: DecisionRecorder
    ) -> None:
        self._policy = policy
        self._recorder = recorder

    def on_request(self, ctx: RequestContext) -> Verdict | Awaitable[Verdict]:
        """Judge the call by its principal and API name."""
        policy = self._policy()
        if policy is None:
            return Forward()  # no policy file: the proxy enforces nothing, and says so at start
        request = AdminRequest(API_CLASSES[ctx.api_key].name, policy_principal(ctx))
        decision = judge_admin(policy, request)
        recorded = self._recorder.record_admin(ctx, policy.revision, decision)
        decision_id = recorded.ids[0]
        assert decision_id is not None
        if not decision.allowed:
            return _refuse(ctx, cite(decision.message, decision_id))
        if recorded.written and self._recorder.waits_for_audit:
            return self._once_audited(ctx, recorded.written, decision_id)
        return Forward()

    async def _once_audited(
        self, ctx: RequestContext, written: Written, decision_id: str
    ) -> Verdict:
        unaudited = await self._recorder.confirmed(written)
        return Forward() if unaudited is None else _refuse(ctx, cite(unaudited, decision_id))


def _refuse(ctx: RequestContext, message: str) -> Verdict:
    body = denial_response(ctx.api_key, ctx.api_version, ctx.frame[ctx.body_offset() :], message)
    if body is None:
        return Close("admin API denied", detail=message)
    return Answer(body)
