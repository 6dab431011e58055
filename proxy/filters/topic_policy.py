"""Topic policy filter: each topic of a guarded admin request is judged before the broker sees it.

Denied topics get synthetic results; the allowed ones go on as a reduced request, and the
broker's response is merged with the synthetic results in the original order.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from codec.guarded import GUARDED_API_KEYS, GuardedApi, SplitPlan, guarded_api
from codec.registry import encode
from codec.topic_view import AnyTopicItem
from policy.engine import CompiledPolicy
from proxy.decision_recorder import DecisionRecorder
from proxy.filter import Answer, Filter, Forward, ForwardModified, RequestContext, Verdict
from proxy.framing import framed
from proxy.live_facts import LiveFacts
from proxy.topic_requests import policy_principal, topic_request


class TopicPolicyFilter(Filter):
    """Answers the denied topics of a guarded admin request and forwards the rest."""

    api_keys = GUARDED_API_KEYS

    def __init__(
        self,
        policy: Callable[[], CompiledPolicy | None],
        facts: LiveFacts,
        recorder: DecisionRecorder,
        legacy_error_code: int,
    ) -> None:
        self._policy = policy
        self._facts = facts
        self._recorder = recorder
        self._legacy_error_code = legacy_error_code

    async def on_request(self, ctx: RequestContext) -> Verdict:
        """Judge the request's topics before anything reaches the broker."""
        api = guarded_api(ctx.api_key)
        assert api is not None
        offset = ctx.body_offset()
        # A guarded request that cannot be decoded raises CodecError: never forwarded unchecked.
        request = api.decode_request(ctx.api_version, ctx.frame[offset:])
        items = api.topic_items(request)
        policy = self._policy()
        validate_only = bool(getattr(request, "validate_only", False))
        if policy is None or not items:
            return Forward(self._invalidating(items, validate_only))
        principal = policy_principal(ctx)
        verdicts = await self._facts.judge(
            policy, [topic_request(item, principal, validate_only) for item in items]
        )
        self._recorder.record(ctx, policy.revision, verdicts)
        denied = {
            item.index: verdict.decision.message
            for item, verdict in zip(items, verdicts, strict=True)
            if verdict.decision is not None and not verdict.decision.allowed
        }
        plan = api.split(request, denied, self._legacy_error_code)
        passed = [item for item in items if item.index not in plan.denied]
        if plan.forward is None:
            return Answer(api.merge(plan, None))
        if plan.forward is request:
            return Forward(self._invalidating(passed, validate_only))
        reduced = framed(ctx.frame[4:offset], encode(plan.forward))
        return ForwardModified(reduced, self._invalidating(passed, validate_only, api, plan, ctx))

    def _invalidating(
        self,
        items: Collection[AnyTopicItem],
        validate_only: bool,
        api: GuardedApi | None = None,
        plan: SplitPlan | None = None,
        ctx: RequestContext | None = None,
    ) -> Callable[[bytes], bytes]:
        facts = self._facts

        def after(body: bytes) -> bytes:
            if not validate_only:
                # The broker may have changed these topics: the next decision must re-read them.
                for item in items:
                    if item.topic is not None:
                        facts.invalidate(item.topic)
            if api is None or plan is None or ctx is None:
                return body
            return api.merge(plan, api.decode_response(ctx.api_version, body))

        return after
