"""Topic policy filter: each topic of a guarded admin request is judged before the broker sees it.

The config resources that are not topics in AlterConfigs and IncrementalAlterConfigs (brokers,
the cluster default, loggers, groups, client metrics) are judged here too, by the policy's
`broker_configs` rules; a resource type the proxy does not know is answered INVALID_REQUEST.

Denied topics get synthetic results; so do topic ids the proxy cannot resolve (answered
UNKNOWN_TOPIC_ID, as a broker answers an id it does not know), and names the facts show
missing where the policy needs their state (UNKNOWN_TOPIC_OR_PARTITION, as a broker answers).
The allowed ones go on as a reduced request (with what the policy's override actions changed
rewritten into it), and the broker's response is merged with the synthetic results in the
original order. What the broker then changed is updated in the cluster-state cache where the
request determines the outcome (a config set; proxy/filters/changed_state.py), and dropped
from it otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog
from kio.schema.errors import ErrorCode

from kafka_policy_proxy.codec.framing import framed
from kafka_policy_proxy.codec.guarded import (
    GUARDED_API_KEYS,
    Denial,
    GuardedApi,
    Rewrite,
    SplitPlan,
    guarded_api,
)
from kafka_policy_proxy.codec.guarded.configs import BROKER_RESOURCE, TOPIC_RESOURCE
from kafka_policy_proxy.codec.topic_view import AnyTopicItem, ConfigResourceItem, DeleteTopicItem
from kafka_policy_proxy.policy.budgets import requested_state
from kafka_policy_proxy.policy.decision_ids import cite
from kafka_policy_proxy.policy.decision_log import is_unknown_topic
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.judge import Verdict as JudgedTopic
from kafka_policy_proxy.policy.model import Override, TopicState
from kafka_policy_proxy.policy.overrides import PARTITIONS
from kafka_policy_proxy.proxy.audit.recorder import DecisionRecorder, Written
from kafka_policy_proxy.proxy.cluster.budget_locks import BudgetLocks, Turn
from kafka_policy_proxy.proxy.cluster.live_facts import LiveFacts
from kafka_policy_proxy.proxy.filters.api import (
    Answer,
    Filter,
    Forward,
    ForwardModified,
    RequestContext,
    Verdict,
)
from kafka_policy_proxy.proxy.filters.budget_turn import judged_in_turn, recording
from kafka_policy_proxy.proxy.filters.changed_state import state_after
from kafka_policy_proxy.proxy.filters.topic_requests import (
    config_resource_request,
    policy_principal,
    topic_request,
)
from kafka_policy_proxy.proxy.metrics import BUDGET_USAGE

log = structlog.get_logger("proxy.enforcement")

DELETE_TOPICS = 20
# Decision ids an audit-failure refusal's log line names (a summary has one for all its topics).
LOGGED_IDS = 100
# A name and an id in one entry could name two topics, and only one would be judged.
NAME_AND_ID = Denial("You may not specify both topic name and topic id.", ErrorCode.invalid_request)


class TopicPolicyFilter(Filter):
    """Answers the denied topics of a guarded admin request and forwards the rest."""

    api_keys = GUARDED_API_KEYS

    def __init__(
        self,
        policy: Callable[[], CompiledPolicy | None],
        facts: LiveFacts,
        recorder: DecisionRecorder,
        legacy_error_code: int,
        locks: BudgetLocks | None = None,
    ) -> None:
        self._policy = policy
        self._facts = facts
        self._recorder = recorder
        self._legacy_error_code = legacy_error_code
        self._locks = locks or BudgetLocks()

    async def on_request(self, ctx: RequestContext) -> Verdict:
        """Judge the request's topics before anything reaches the broker."""
        api = guarded_api(ctx.api_key)
        assert api is not None
        offset = ctx.body_offset()
        # A guarded request that cannot be decoded raises CodecError: never forwarded unchecked.
        request = api.decode_request(ctx.api_version, ctx.frame[offset:])
        items = api.topic_items(request)
        resources = api.resource_items(request)
        policy = self._policy()
        validate_only = bool(getattr(request, "validate_only", False))
        if policy is None or not (items or resources):
            names = [item.topic for item in items if item.topic is not None]
            return Forward(
                self._after(ctx, api, request, plan=None, names=names, validate_only=validate_only)
            )
        principal = policy_principal(ctx)
        denied: dict[int, str | Denial] = {i.index: NAME_AND_ID for i in items if _name_and_id(i)}
        written: Written = []
        # index -> the id of its decision, which every message the client sees about it ends with
        ids: dict[int, str] = {}
        if resources:
            denied.update(
                await self._judge_resources(
                    ctx, policy, resources, validate_only, written=written, ids=ids
                )
            )
        judged = [item for item in items if item.index not in denied]
        requests = [topic_request(item, principal, validate_only) for item in judged]
        # What a budget judges is decided and forwarded in its turn (proxy/cluster/budget_locks).
        verdicts, turn = await judged_in_turn(
            self._locks,
            self._facts,
            policy,
            requests,
            ctx.connection_id,
            take_turn=not validate_only,
        )
        try:
            return await self._decided(
                ctx,
                api,
                request=request,
                policy=policy,
                items=items,
                resources=resources,
                judged=judged,
                verdicts=verdicts,
                denied=denied,
                written=written,
                ids=ids,
                turn=turn,
            )
        except BaseException:
            if turn is not None:
                turn.release()
            raise

    async def _decided(
        self,
        ctx: RequestContext,
        api: GuardedApi,
        *,
        request: Any,
        policy: CompiledPolicy,
        items: Sequence[AnyTopicItem],
        resources: Sequence[ConfigResourceItem],
        judged: Sequence[AnyTopicItem],
        verdicts: Sequence[JudgedTopic],
        denied: dict[int, str | Denial],
        written: Written,
        ids: dict[int, str],
        turn: Turn | None,
    ) -> Verdict:
        """Answer the denied topics and forward the rest (the turn, if any, goes with them)."""
        offset = ctx.body_offset()
        validate_only = bool(getattr(request, "validate_only", False))
        recorded = self._recorder.record(ctx, policy.revision, verdicts)
        written += recorded.written
        _gauge(policy, verdicts)
        rewrites: dict[int, Rewrite] = {}
        unknown_ids = 0
        for item, verdict, decision_id in zip(judged, verdicts, recorded.ids, strict=True):
            if decision_id is not None:
                ids[item.index] = decision_id
            if verdict.decision is not None and verdict.decision.overrides:
                rewrites[item.index] = _rewrite(verdict.decision.overrides)
            if verdict.decision is None:
                # Never forwarded: the broker might know an id the proxy cannot judge.
                reason = verdict.reason or "the topic id names no known topic"
                unknown_ids += 1
                denied[item.index] = Denial(reason, ErrorCode.unknown_topic_id)
            elif not verdict.decision.allowed:
                name = verdict.request.name or None
                # A topic the facts show missing gets the broker's own answer.
                code = (
                    ErrorCode.unknown_topic_or_partition
                    if is_unknown_topic(verdict.decision)
                    else None
                )
                message = cite(verdict.decision.message, ids[item.index])
                denied[item.index] = Denial(message, code, name=name)
        if unknown_ids:
            # One line per request: a request of many made-up ids must not flood the log.
            log.info("unknown topic ids answered", conn=ctx.connection_id, ids=unknown_ids)
        unaudited = None if validate_only else await self._recorder.confirmed(written)
        if unaudited is not None:
            # audit.on_failure: closed: nothing changes that the audit topic has not recorded.
            # The ids the refusals quote, bounded: the records may be nowhere else.
            quoted = list(dict.fromkeys(ids.values()))
            log.warning(
                "mutation refused: audit log unavailable",
                conn=ctx.connection_id,
                decision_ids=quoted[:LOGGED_IDS],
                decisions=len(quoted),
            )
            for index in [item.index for item in items] + [r.index for r in resources]:
                decision_id = ids.get(index)
                refusal = unaudited if decision_id is None else cite(unaudited, decision_id)
                denied.setdefault(index, refusal)
        plan = api.split(request, denied, self._legacy_error_code, rewrites)
        names = []
        after: dict[str, TopicState] = {}
        ledger: dict[str, TopicState] = {}
        for item, verdict in zip(judged, verdicts, strict=True):
            if item.index in plan.denied or not verdict.request.name:
                continue
            names.append(verdict.request.name)
            assert verdict.decision is not None  # an undecided verdict is denied above
            state = state_after(verdict.request, verdict.decision.overrides)
            if state is not None:
                after[verdict.request.name] = state
            if turn is not None and verdict.decision.budgets:
                ledger[verdict.request.name] = requested_state(verdict.request, {})
        if plan.forward is None:
            if turn is not None:
                turn.release()
            return Answer(api.merge(plan, None))
        budgets = None if turn is None else (turn, ledger)
        if plan.forward is request:
            return Forward(
                self._after(
                    ctx,
                    api,
                    request,
                    plan=None,
                    names=names,
                    validate_only=validate_only,
                    to=after,
                    budgets=budgets,
                )
            )
        reduced = framed(ctx.frame[4:offset], api.forward_body(plan, ctx.frame, offset))
        hook = self._after(
            ctx,
            api,
            plan.forward,
            plan=plan,
            names=names,
            validate_only=validate_only,
            to=after,
            budgets=budgets,
        )
        return ForwardModified(reduced, hook)

    def on_close(self, connection_id: int) -> None:
        """The connection ended: its budget turns are given back."""
        self._locks.close_connection(connection_id)

    async def _judge_resources(
        self,
        ctx: RequestContext,
        policy: CompiledPolicy,
        resources: Sequence[ConfigResourceItem],
        validate_only: bool,
        *,
        written: Written,
        ids: dict[int, str],
    ) -> dict[int, str | Denial]:
        """Judge the config resources that are not topics: brokers, loggers, groups...; adds
        their records' deliveries to `written` and their ids to `ids`."""
        principal = policy_principal(ctx)
        denied: dict[int, str | Denial] = {}
        judged = []
        for item in resources:
            request = config_resource_request(item, principal, validate_only)
            if request is None:
                # What the proxy cannot name it cannot judge: never forwarded.
                reason = f"config resource type {item.resource_type} is not one the proxy judges"
                denied[item.index] = Denial(reason, ErrorCode.invalid_request)
            else:
                judged.append((item.index, request))
        decisions = await self._facts.judge_broker_configs(policy, [r for _, r in judged])
        recorded = self._recorder.record_broker_configs(ctx, policy.revision, decisions)
        written += recorded.written
        for (index, _), decision, decision_id in zip(judged, decisions, recorded.ids, strict=True):
            assert decision_id is not None  # every config resource decision has its id
            ids[index] = decision_id
            if not decision.allowed:
                denied[index] = cite(decision.message, decision_id)
        return denied

    def _after(
        self,
        ctx: RequestContext,
        api: GuardedApi,
        forwarded: Any,
        *,
        plan: SplitPlan | None,
        names: Sequence[str],
        validate_only: bool,
        to: Mapping[str, TopicState] | None = None,
        budgets: tuple[Turn, Mapping[str, TopicState]] | None = None,
    ) -> Callable[[bytes], bytes]:
        """The response hook: update or forget what the broker changed, then merge a split
        answer. `to` holds the topics' states after the change, where the request tells them;
        `budgets` the budget turn, given back once the cache and its ledger are updated."""
        inner = self._hook(
            ctx, api, forwarded, plan=plan, names=names, validate_only=validate_only, to=to
        )
        if budgets is None:
            return inner
        turn, ledger = budgets

        def accepted(body: bytes) -> list[TopicState]:
            response = api.decode_response(ctx.api_version, body)
            return [ledger[n] for n in _accepted_names(api, response) if n in ledger]

        return recording(turn, inner, accepted)

    def _hook(
        self,
        ctx: RequestContext,
        api: GuardedApi,
        forwarded: Any,
        *,
        plan: SplitPlan | None,
        names: Sequence[str],
        validate_only: bool,
        to: Mapping[str, TopicState] | None,
    ) -> Callable[[bytes], bytes]:
        facts = self._facts
        version = ctx.api_version
        brokers = _broker_resources(api, forwarded)
        known = to or {}

        def after(body: bytes) -> bytes:
            response = None
            # A split answer is merged from its bytes: decoded only for what the cache needs.
            if not validate_only and (ctx.api_key == DELETE_TOPICS or brokers or known):
                response = api.decode_response(version, body)
            if not validate_only:
                # The broker may have changed these: the next decision must not see them as
                # they were. A change the broker accepted whose outcome is known is cached.
                accepted = _accepted_topics(response) if known else set()
                for name in names:
                    if name in accepted and name in known:
                        facts.changed(known[name])
                    else:
                        facts.invalidate(name)
                if brokers:
                    facts.invalidate_broker_defaults(_accepted(brokers, response))
                if response is not None and ctx.api_key == DELETE_TOPICS:
                    _forget_deleted(facts, response)
            return body if plan is None else api.merge_body(plan, body)

        return after


def _accepted_names(api: GuardedApi, response: Any) -> set[str]:
    """The topics a response shows no error for: the broker changed them."""
    names = set()
    for result in getattr(response, api.results_field):
        if result.error_code is not ErrorCode.none:
            continue
        for key in api.result_keys(result):
            if isinstance(key, str):
                names.add(key)
            elif isinstance(key, tuple) and len(key) == 2 and int(key[0]) == TOPIC_RESOURCE:
                names.add(str(key[1]))
    return names


def _gauge(policy: CompiledPolicy, verdicts: Sequence[JudgedTopic]) -> None:
    """Each topic-scope budget's usage after what was allowed (per-principal ones have many)."""
    per_user = {b.spec.name for b in policy.budgets if b.per_user}
    for verdict in verdicts:
        decision = verdict.decision
        if decision is None:
            continue
        for use in decision.budgets:
            if use.name in per_user or use.usage is None:
                continue
            added = use.added if decision.allowed and use.added is not None else 0
            BUDGET_USAGE.labels(budget=use.name, unit=use.unit).set(use.usage + added)


def _rewrite(overrides: Sequence[Override]) -> Rewrite:
    """The wire changes for a topic's overrides (the last one per target wins)."""
    configs = {o.target: o.after for o in overrides if o.target != PARTITIONS}
    counts = [int(o.after) for o in overrides if o.target == PARTITIONS]
    return Rewrite(partitions=counts[-1] if counts else None, configs=tuple(configs.items()))


def _broker_resources(api: GuardedApi, request: Any) -> list[ConfigResourceItem]:
    """The broker resources (the cluster default among them) a forwarded request changes."""
    if not api.changes_broker_configs(request):
        return []
    return [i for i in api.resource_items(request) if i.resource_type == BROKER_RESOURCE]


def _accepted(items: Sequence[ConfigResourceItem], response: Any) -> list[ConfigResourceItem]:
    """The resources the broker answered without an error: it changed them."""
    done = _done(response)
    return [i for i in items if (i.resource_type, i.name) in done]


def _accepted_topics(response: Any) -> set[str]:
    """The topics a config change response answered without an error."""
    return {name for kind, name in _done(response) if kind == TOPIC_RESOURCE}


def _done(response: Any) -> set[tuple[int, str]]:
    """(resource type, name) of every resource a config change response shows no error for."""
    return {
        (int(r.resource_type), r.resource_name)
        for r in response.responses
        if r.error_code is ErrorCode.none
    }


def _forget_deleted(facts: LiveFacts, response: Any) -> None:
    """Topics the broker deleted are known to be absent, by name and by id."""
    for result in response.responses:
        topic_id = getattr(result, "topic_id", None)
        if result.error_code is ErrorCode.none:
            facts.deleted(result.name, None if topic_id is None else str(topic_id))
        elif result.name is not None:
            facts.invalidate(result.name)


def _name_and_id(item: AnyTopicItem) -> bool:
    return (
        isinstance(item, DeleteTopicItem)
        and item.topic is not None
        and item.topic_id is not None
        and item.topic_id.int != 0
    )
