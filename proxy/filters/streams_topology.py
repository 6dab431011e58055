"""Streams topology filter: the internal topics a StreamsGroupHeartbeat would create are judged.

With the Streams rebalance protocol (KIP-1071) the group coordinator creates the repartition
and changelog topics a member's topology declares, with the partitions, replication factor
and configs the member chose. Each one the cluster lacks is judged here as a create, by the
topic rules and the Streams rules, and recorded. If any is denied, or the policy would have
to change one (a heartbeat has nothing to rewrite), the heartbeat is answered
STREAMS_INVALID_TOPOLOGY, which a Streams client treats as fatal and logs with the message;
the broker never sees it. Facts or an audit record that cannot be had answer
COORDINATOR_NOT_AVAILABLE, which the client retries. A heartbeat without a topology (all but
the join) goes on after a scan of its first fields.

Topics a budget judges are decided in the budget's turn, as CreateTopics are
(proxy/filters/budget_turn.py), held until the coordinator's answer: it creates them after an
answer without an error, so the next holder counts them from then. A turn not had in time
denies the topology (STREAMS_INVALID_TOPOLOGY, with the reason).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import structlog
from kio.schema.errors import ErrorCode

from kafka_policy_proxy.codec.streams_heartbeat import (
    STREAMS_GROUP_HEARTBEAT,
    InternalTopic,
    accepted,
    decode_heartbeat,
    denial,
    has_topology,
    internal_topics,
    partitions_bound,
)
from kafka_policy_proxy.policy.builders import create_request
from kafka_policy_proxy.policy.decision_ids import cite
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.judge import FactQuery, overrides_refused
from kafka_policy_proxy.policy.judge import Verdict as TopicVerdict
from kafka_policy_proxy.policy.model import Fact, TopicState
from kafka_policy_proxy.proxy.audit.recorder import DecisionRecorder
from kafka_policy_proxy.proxy.cluster.budget_locks import BudgetLocks
from kafka_policy_proxy.proxy.cluster.live_facts import LiveFacts
from kafka_policy_proxy.proxy.cluster.unavailable import ClusterStateUnavailable
from kafka_policy_proxy.proxy.filters.api import Answer, Filter, Forward, RequestContext, Verdict
from kafka_policy_proxy.proxy.filters.budget_turn import budgeted, judged_in_turn, recording
from kafka_policy_proxy.proxy.filters.topic_requests import forgetting, policy_principal

log = structlog.get_logger("proxy.enforcement")

# Denied topics a denial message names; the rest are counted (the audit has every one).
NAMED_IN_MESSAGE = 3
# As guarded requests: 10 x limits.max_entries_per_request's default (the lead may pass that).
MAX_ELEMENTS = 50_000
# The coordinator creates what the topology declares: a topic the policy would change is denied.
STREAMS_TOPOLOGY = "a Streams topology"
CREATE_FIRST = "create the topic with CreateTopics first"


class StreamsTopologyFilter(Filter):
    """StreamsGroupHeartbeat: a topology whose new internal topics the policy denies is refused."""

    api_keys = frozenset({STREAMS_GROUP_HEARTBEAT})

    def __init__(
        self,
        policy: Callable[[], CompiledPolicy | None],
        facts: LiveFacts,
        recorder: DecisionRecorder,
        max_elements: int = MAX_ELEMENTS,
        locks: BudgetLocks | None = None,
    ) -> None:
        """`max_elements`: array elements a topology may declare in all, checked before it is
        decoded (over it, the heartbeat is refused); `locks`: the budgets' turns."""
        self._policy = policy
        self._facts = facts
        self._recorder = recorder
        self._max_elements = max_elements
        self._locks = locks or BudgetLocks()

    def on_request(self, ctx: RequestContext) -> Verdict | Awaitable[Verdict]:
        """Forward a plain heartbeat; judge the internal topics a topology would create."""
        policy = self._policy()
        offset = ctx.body_offset()
        if policy is None or not has_topology(ctx.api_version, ctx.frame, offset):
            return Forward()
        request = decode_heartbeat(ctx.api_version, ctx.frame, offset, self._max_elements)
        if request is None:
            log.warning("streams topology refused: too large", conn=ctx.connection_id)
            return Answer(denial(f"the topology has over {self._max_elements} elements"))
        topics = internal_topics(request)
        if not topics:
            return Forward()
        return self._judge(ctx, policy, topics)

    async def _judge(
        self, ctx: RequestContext, policy: CompiledPolicy, topics: Sequence[InternalTopic]
    ) -> Verdict:
        names = {t.name for t in topics} | {s for t in topics for s in t.source_topics}
        try:
            facts = await self._facts.read(
                FactQuery(frozenset({Fact.TOPIC_STATE}), frozenset(names))
            )
        except ClusterStateUnavailable as exc:
            log.warning("streams topology refused: cluster state unavailable", detail=str(exc))
            return _retry(f"[cluster-state] {exc}")

        def existing(name: str) -> int | None:
            state = facts.cluster.topic(name)
            return None if state is None else state.partitions

        missing = [t for t in topics if existing(t.name) is None]
        if not missing:
            return Forward()  # the coordinator creates nothing; it checks partition counts
        counts = partitions_bound(list(topics), existing)
        principal = policy_principal(ctx)
        requests = [
            create_request(
                t.name,
                _or_default(counts[t.name]),
                _or_default(t.replication_factor),
                None,
                t.configs,
                principal=principal,
            )
            for t in missing
        ]
        judged, turn = await judged_in_turn(
            self._locks, self._facts, policy, requests, ctx.connection_id, creating=True
        )
        try:
            verdicts = [overrides_refused(v, STREAMS_TOPOLOGY, CREATE_FIRST) for v in judged]
            refusal = await self._refusal(ctx, policy, verdicts)
        except BaseException:
            if turn is not None:
                turn.release()
            raise
        if refusal is not None:
            if turn is not None:
                turn.release()
            return refusal
        hook = forgetting(self._facts, [t.name for t in missing])
        if turn is None:
            return Forward(hook)
        ledger = budgeted(verdicts)
        version = ctx.api_version

        def created(body: bytes) -> list[TopicState]:
            # The coordinator creates the topics after it answers: counted from the answer.
            return list(ledger.values()) if accepted(version, body) else []

        return Forward(recording(turn, hook, created))

    async def _refusal(
        self, ctx: RequestContext, policy: CompiledPolicy, verdicts: Sequence[TopicVerdict]
    ) -> Answer | None:
        """Record the verdicts; the answer if any is denied or the audit cannot have them."""
        recorded = self._recorder.record(ctx, policy.revision, verdicts)
        denied = [
            (v, decision_id)
            for v, decision_id in zip(verdicts, recorded.ids, strict=True)
            if v.decision is not None and not v.decision.allowed
        ]
        if denied:
            return Answer(denial(_message(denied)))
        unaudited = await self._recorder.confirmed(recorded.written)
        if unaudited is not None:
            log.warning("streams topology refused: audit log unavailable", conn=ctx.connection_id)
            first = next((i for i in recorded.ids if i is not None), None)
            return _retry(unaudited if first is None else cite(unaudited, first))
        return None

    def on_close(self, connection_id: int) -> None:
        """The connection ended: its budget turns are given back."""
        self._locks.close_connection(connection_id)


def _or_default(count: int | None) -> int:
    """-1 (the broker default) for a count that is absent or 0."""
    return count if count else -1


def _retry(message: str) -> Answer:
    return Answer(denial(message, ErrorCode.coordinator_not_available))


def _message(denied: Sequence[tuple[TopicVerdict, str | None]]) -> str:
    """The first few denials' reasons, each ending with its decision id; then how many more
    (their records have theirs)."""
    named = denied[:NAMED_IN_MESSAGE]
    reasons = [
        v.decision.message if i is None else cite(v.decision.message, i)
        for v, i in named
        if v.decision is not None
    ]
    text = "the topology's internal topics are denied by the policy: " + "; ".join(reasons)
    more = len(denied) - NAMED_IN_MESSAGE
    return text + (f"; and {more} more" if more > 0 else "")
