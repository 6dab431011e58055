"""Auto-create guard: a Metadata request that would create a denied topic goes on without it.

The broker creates a topic a Metadata request names when auto-creation is on. Each topic it
would create is judged as a create; if any is denied, the request reaches the broker with
auto-creation off, so the client sees the topic as unknown; so does a request whose topics
all exist (nothing is to be created). A topic the proxy has just seen deleted is known to be
absent (the cluster-state cache), so its re-creation is judged too. A request naming more
topics than `limits.max_entries_per_request` is not judged: its auto-creation is turned off
(v4+), or its connection closed (v0-3 cannot turn it off), so no Metadata request costs more
reads and judgements than the largest admin request.

Creations a budget judges are decided in the budget's turn, as CreateTopics are
(proxy/filters/budget_turn.py): held until the broker's answer, whose topics shown as there or
being created the next holder counts; a turn not had in time turns auto-creation off.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import structlog

from kafka_policy_proxy.codec.framing import framed
from kafka_policy_proxy.codec.metadata_request import (
    AUTO_CREATE_FLAG_VERSION,
    decode_metadata_request,
    metadata_topics,
    without_auto_create,
)
from kafka_policy_proxy.codec.metadata_response import shown_topics
from kafka_policy_proxy.codec.registry import encode
from kafka_policy_proxy.policy.builders import create_request
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.judge import FactQuery, overrides_refused
from kafka_policy_proxy.policy.model import Fact, TopicState
from kafka_policy_proxy.proxy.audit.recorder import DecisionRecorder
from kafka_policy_proxy.proxy.cluster.budget_locks import BudgetLocks, Turn
from kafka_policy_proxy.proxy.cluster.live_facts import LiveFacts
from kafka_policy_proxy.proxy.cluster.unavailable import ClusterStateUnavailable
from kafka_policy_proxy.proxy.filters.api import (
    Close,
    Filter,
    Forward,
    ForwardModified,
    RequestContext,
    Verdict,
)
from kafka_policy_proxy.proxy.filters.budget_turn import budgeted, judged_in_turn, recording
from kafka_policy_proxy.proxy.filters.topic_requests import forgetting, policy_principal

log = structlog.get_logger("proxy.enforcement")

METADATA = 3


class AutoCreateGuardFilter(Filter):
    """Metadata requests: a denied auto-creation reaches the broker with auto-creation off."""

    api_keys = frozenset({METADATA})

    def __init__(
        self,
        policy: Callable[[], CompiledPolicy | None],
        facts: LiveFacts,
        recorder: DecisionRecorder,
        max_names: int = 5000,
        locks: BudgetLocks | None = None,
    ) -> None:
        self._policy = policy
        self._facts = facts
        self._recorder = recorder
        self._max_names = max_names
        self._locks = locks or BudgetLocks()

    def on_request(self, ctx: RequestContext) -> Verdict | Awaitable[Verdict]:
        """Forward; judge first if the request could create topics."""
        policy = self._policy()
        if policy is None:
            return Forward()
        request = decode_metadata_request(ctx.api_version, ctx.frame[ctx.body_offset() :])
        topics = metadata_topics(request)
        if not topics.allow_auto_topic_creation or not topics.names:
            return Forward()
        if len(topics.names) > self._max_names:
            log.warning(
                "auto-creation not judged: too many topics",
                conn=ctx.connection_id,
                topics=len(topics.names),
                limit=f"limits.max_entries_per_request is {self._max_names}",
            )
            if request.__version__ < AUTO_CREATE_FLAG_VERSION:
                return Close("request too large", "Metadata v0-3 naming too many topics to judge")
            return _without_auto_create(ctx, request)
        return self._guard(ctx, request, topics.names, policy)

    async def _guard(
        self, ctx: RequestContext, request: Any, names: Sequence[str], policy: CompiledPolicy
    ) -> Verdict:
        try:
            facts = await self._facts.read(
                FactQuery(frozenset({Fact.TOPIC_STATE}), frozenset(names))
            )
        except ClusterStateUnavailable as exc:
            log.warning("auto-creation turned off: cluster state unavailable", detail=str(exc))
            return _without_auto_create(ctx, request)
        missing = [name for name in dict.fromkeys(names) if facts.cluster.topic(name) is None]
        if not missing:
            # Nothing is to be created: with auto-creation off, a topic deleted meanwhile
            # cannot come back unjudged.
            if request.__version__ < AUTO_CREATE_FLAG_VERSION:
                return Forward()
            return _without_auto_create(ctx, request)
        principal = policy_principal(ctx)
        requests = [create_request(name, principal=principal) for name in missing]
        judged, turn = await judged_in_turn(
            self._locks, self._facts, policy, requests, ctx.connection_id, creating=True
        )
        try:
            verdicts = [
                overrides_refused(v, "auto-creation", "create the topic with CreateTopics")
                for v in judged
            ]
            # Metadata has no message to quote the ids in: the log lines and records carry them.
            recorded = self._recorder.record(ctx, policy.revision, verdicts)
            if not all(v.decision is None or v.decision.allowed for v in verdicts):
                return _released(turn, _without_auto_create(ctx, request))
            if await self._recorder.confirmed(recorded.written) is not None:
                # audit.on_failure: closed
                return _released(turn, _without_auto_create(ctx, request))
        except BaseException:
            if turn is not None:
                turn.release()
            raise
        hook = forgetting(self._facts, missing)
        if turn is None:
            return Forward(hook)
        ledger = budgeted(verdicts)
        version = ctx.api_version

        def created(body: bytes) -> list[TopicState]:
            return [ledger[n] for n in shown_topics(version, body) if n in ledger]

        return Forward(recording(turn, hook, created))

    def on_close(self, connection_id: int) -> None:
        """The connection ended: its budget turns are given back."""
        self._locks.close_connection(connection_id)


def _released(turn: Turn | None, verdict: ForwardModified) -> ForwardModified:
    """Nothing is created: the turn, if any, goes back now."""
    if turn is not None:
        turn.release()
    return verdict


def _without_auto_create(ctx: RequestContext, request: Any) -> ForwardModified:
    return ForwardModified(
        framed(ctx.frame[4 : ctx.body_offset()], encode(without_auto_create(request)))
    )
