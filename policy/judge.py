"""The one judge: topic requests, the policy and the cluster facts in; one verdict per topic out.

The proxy, `policy eval` and `policy test`, the replay and the scan all decide through this
module, so the same request with the same facts gets the same decision everywhere. It is
sans-IO, like h11: `Judgement(policy, requests).query` says which facts to read; the caller
reads them from its source (the proxy's live cache, a cluster file or snapshot, a recorded
audit event) and passes them to `decide`, or calls `unavailable` when they cannot be read.
`judge()` does both for a synchronous `FactSource`.

This is the only place that knows:
- which facts a batch needs (the union of every topic's needs, plus the topic state of a
  delete by topic id, which is needed to learn the name);
- that an id naming no known topic is not decided here (the caller answers it);
- that a non-create whose current state the rules need, but the facts show missing, is not
  judged by the rules: the topic does not exist, and it is answered as the broker would
  (UNKNOWN_TOPIC_OR_PARTITION), recorded with the `unknown-topic` outcome, never as a policy
  violation (judging without its state could let a change through);
- that facts which cannot be read deny every topic (fail closed);
- that facts an offline source never recorded leave the topic undecided, with the reason;
- that the creates of one batch see each other's names (`policy.batch`: name collisions);
- that the topics of one batch are judged against the budgets after one another, in request
  order (`policy.budgets`: what an earlier allowed topic adds, a later one cannot use);
- that override actions (`policy.overrides`) rewrite a request before it is evaluated.
Audit mode and dry run are the compiled policy's (`CompiledPolicy.evaluate`); exceptions
(`policy.exceptions`) waive rules while `now`, the instant of judgement every caller passes
(a timezone-aware datetime; None waives nothing), is before their expiry. No clock is read here.
Cluster and security mutation APIs are judged by `judge_admin` (`policy/admin_apis.py`), the
config resources that are not topics (brokers, the cluster default, loggers, groups, client
metrics) by `BrokerConfigJudgement` (`policy/broker_configs.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial
from typing import Protocol

from kafka_policy_proxy.policy.admin_apis import AdminDecision, AdminRequest, decide_admin
from kafka_policy_proxy.policy.batch import with_new_names
from kafka_policy_proxy.policy.broker_configs import (
    BrokerConfigDecision,
    BrokerConfigRequest,
    grant,
    reaches_topics,
)
from kafka_policy_proxy.policy.broker_configs import decide as decide_broker_config
from kafka_policy_proxy.policy.budgets import (
    BudgetBook,
    BudgetKey,
    BudgetScope,
    CompiledBudget,
    facts_of,
    retention_scope,
    touched,
)
from kafka_policy_proxy.policy.budgets import needs as budget_needs
from kafka_policy_proxy.policy.builders import FactFolder
from kafka_policy_proxy.policy.cluster import ClusterState, InMemoryCluster
from kafka_policy_proxy.policy.decision_log import UNKNOWN_TOPIC_RULE
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.model import (
    Action,
    Decision,
    Fact,
    Mode,
    TopicRequest,
    Violation,
    assembler,
)

CLUSTER_STATE_RULE = "cluster-state"
# A reason is repeated in every topic's answer and record: bounded, so that an answer stays in
# proportion to its request whatever a failed read's reason lists.
MAX_REASON_CHARS = 200


@dataclass(frozen=True, slots=True)
class FactQuery:
    """The facts a batch needs: TOPIC_STATE is read only for the names and ids listed."""

    facts: frozenset[Fact]
    names: frozenset[str] = frozenset()
    ids: frozenset[str] = frozenset()
    # TOPIC_STATE for every topic in the cluster (a new topic-config default reaches them all).
    all_topics: bool = False
    # With BUDGET_USAGE: the topics whose configs the budgets read (TOPIC_STATE for them).
    scoped: BudgetScope | None = None
    # TOPIC_USAGE is read only for these topics, and those these ids name (deletes by id).
    usage: frozenset[str] = frozenset()
    usage_ids: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Facts:
    """Facts read for a query: the cluster, and which facts to fold into each request.

    `resolve` is empty when the requests already carry their state (a recorded event, a
    scanned topic), so that nothing is recomputed over it.
    """

    cluster: ClusterState
    resolve: frozenset[Fact]


NO_FACTS = Facts(InMemoryCluster(), frozenset())
# The queries that name no topic, one per set of facts (few): shared, not built per request.
_FACTS_ONLY: dict[frozenset[Fact], FactQuery] = {}


def _facts_only(facts: frozenset[Fact]) -> FactQuery:
    query = _FACTS_ONLY.get(facts)
    if query is None:
        query = _FACTS_ONLY[facts] = FactQuery(facts)
    return query


class FactsUnavailable(Exception):
    """The facts could not be read (cluster unreachable, timeout): every topic is denied."""


class FactsNotRecorded(Exception):
    """An offline source does not hold the facts: the topics stay undecided, with the reason."""


class FactSource(Protocol):
    """Where facts come from, synchronously: a described cluster, a snapshot, a recorded event."""

    def read(self, query: FactQuery) -> Facts:
        """The facts for the query; FactsUnavailable or FactsNotRecorded if it cannot."""
        ...


@dataclass(frozen=True, slots=True)
class Verdict:
    """One topic: the request as judged (facts folded in) and its decision.

    `decision` is None when the judge did not decide: a topic id naming no known topic (the
    proxy answers it UNKNOWN_TOPIC_ID itself), or facts the source never recorded (`reason`
    says which).
    """

    request: TopicRequest
    decision: Decision | None
    reason: str | None = None
    # The request before the policy's override actions changed it (None if they did not).
    original: TopicRequest | None = None


# Each topic's verdict, every field given (no `__init__`): one per topic of every batch.
_VERDICT = assembler(Verdict)


class Judgement:
    """Judging one batch of topic requests: read `query`, then `decide` (or `unavailable`)."""

    __slots__ = ("_needs", "_now", "_policy", "_requests", "_touched", "query")

    def __init__(
        self,
        policy: CompiledPolicy,
        requests: Sequence[TopicRequest],
        *,
        now: datetime | None = None,
    ) -> None:
        self._policy = policy
        self._requests = tuple(requests)
        self._now = aware(now)
        budgets = policy.budgets
        # The budgets that judge each request: found once, for the query and for `decide`.
        found: list[list[tuple[CompiledBudget, BudgetKey]]] | None = [] if budgets else None
        # Whether `decide` keeps a budget book: a budget judges a request, or a request has no
        # name yet (the facts may give it one that a budget counts).
        book = False
        # Kept for `decide`: a request nothing is folded into needs what it needed here.
        needs: list[frozenset[Fact]] = []
        facts: set[Fact] = set()
        names: set[str] = set()
        ids: set[str] = set()
        usage: set[str] = set()
        usage_ids: set[str] = set()
        for request in self._requests:
            needed = policy.needs(request)
            if found is not None:
                touches = touched(budgets, request)
                found.append(touches)
                if touches:
                    needed = needed | facts_of(request, touches)
                book = book or bool(touches) or (request.topic is None and request.current is None)
            needs.append(needed)
            if not request.name:
                needed |= {Fact.TOPIC_STATE}  # a delete by topic id needs the topic's name
                if request.topic_id is not None and policy.reads_usage(request.action):
                    needed |= {Fact.TOPIC_USAGE}  # an in_use rule may select the name
                    usage_ids.add(request.topic_id)
            elif Fact.TOPIC_USAGE in needed and request.usage is None:
                usage.add(request.name)
            facts |= needed
            if Fact.TOPIC_STATE in needed and request.current is None:
                if request.topic is not None:
                    names.add(request.topic)
                elif request.topic_id is not None:
                    ids.add(request.topic_id)
        self._needs = tuple(needs)
        # None: no budget book (and no retention scope) for this batch.
        self._touched = tuple(found) if found is not None and book else None
        scoped = None if self._touched is None else retention_scope(self._touched)
        if names or ids or usage or usage_ids or scoped is not None:
            self.query = FactQuery(
                frozenset(facts),
                frozenset(names),
                frozenset(ids),
                scoped=scoped,
                usage=frozenset(usage),
                usage_ids=frozenset(usage_ids),
            )
        else:
            self.query = _facts_only(frozenset(facts))

    def decide(self, facts: Facts) -> list[Verdict]:
        """Fold the facts into each request and evaluate it."""
        policy, cluster, wanted = self._policy, facts.cluster, facts.resolve
        # The rules see the batch's other new names (a name collision inside the request).
        requests = self._requests
        judged = with_new_names(cluster, requests) if len(requests) > 1 else cluster
        found = self._touched
        budgets = None if found is None else BudgetBook(policy.budgets, cluster, policy.dry_run)
        waive, now = policy.exceptions.apply, self._now
        fold = FactFolder(cluster, wanted) if wanted else None
        verdicts = []
        for index, (request, needed) in enumerate(zip(requests, self._needs, strict=True)):
            resolved = request if fold is None else fold(request)
            if not resolved.name:
                verdicts.append(
                    Verdict(resolved, None, f"topic id {resolved.topic_id} names no known topic")
                )
            elif (
                resolved.current is None
                and resolved.action is not Action.CREATE
                and Fact.TOPIC_STATE
                in (
                    policy.needs(resolved) | budget_needs(policy.budgets, resolved)
                    if wanted
                    else needed
                )
            ):
                verdicts.append(_unknown_topic(resolved))
            else:
                rewritten, overrides = policy.override(resolved)
                decision = policy.evaluate(rewritten, judged)
                if budgets is None:
                    decision = waive(rewritten, decision, now)
                else:
                    # Exceptions may waive a budget too: the book counts what is allowed in
                    # the end. What a budget judges depends on the name, not on the facts.
                    decision = budgets.judge(
                        rewritten,
                        decision,
                        partial(waive, rewritten, now=now),
                        found[index]
                        if found is not None and rewritten.name == request.name
                        else None,
                    )
                if not overrides:
                    verdicts.append(_VERDICT(resolved, decision, None, None))
                else:
                    decision = replace(decision, overrides=overrides)
                    verdicts.append(Verdict(rewritten, decision, original=resolved))
        return verdicts

    def unavailable(self, reason: str) -> list[Verdict]:
        """The facts could not be read: deny every topic, saying why (fail closed)."""
        message = (
            f"[{CLUSTER_STATE_RULE}] the proxy cannot read the cluster state ({bounded(reason)}); "
            "denied because the policy cannot be checked"
        )
        return [_denied(request, message) for request in self._requests]

    def not_recorded(self, reason: str) -> list[Verdict]:
        """The source lacks facts the policy needs: leave every topic undecided."""
        return [Verdict(request, None, reason) for request in self._requests]


def judge(
    policy: CompiledPolicy,
    requests: Sequence[TopicRequest],
    source: FactSource,
    *,
    now: datetime | None = None,
) -> list[Verdict]:
    """Judge a batch against a synchronous fact source, at the instant `now`."""
    judgement = Judgement(policy, requests, now=now)
    try:
        facts = source.read(judgement.query)
    except FactsUnavailable as exc:
        return judgement.unavailable(str(exc))
    except FactsNotRecorded as exc:
        return judgement.not_recorded(str(exc))
    return judgement.decide(facts)


class BrokerConfigJudgement:
    """Judging the non-topic config resources of one request: `query`, then `decide`.

    The rules' grants need no facts; a new topic-config default that they allow needs every
    topic's state (`FactQuery.all_topics`), to find the topics it would put outside the rules,
    unless no topic rule checks its key (then no topic's verdict can change).
    """

    __slots__ = ("_grants", "_needs", "_policy", "_requests", "query")

    def __init__(self, policy: CompiledPolicy, requests: Sequence[BrokerConfigRequest]) -> None:
        self._policy = policy
        self._requests = tuple(requests)
        self._grants = tuple(grant(policy.document, r) for r in self._requests)
        self._needs = tuple(
            reaches_topics(policy.document, r) and all(v.mode is Mode.AUDIT for v in g.violations)
            for r, g in zip(self._requests, self._grants, strict=True)
        )
        self.query = (
            FactQuery(frozenset(Fact) - {Fact.TOPIC_USAGE}, all_topics=True)
            if any(self._needs)
            else FactQuery(frozenset())
        )

    def decide(self, facts: Facts) -> list[BrokerConfigDecision]:
        """Decide each resource; those that set topic defaults are checked against the topics."""
        return [
            decide_broker_config(self._policy, request, granted, facts.cluster if needs else None)
            for request, granted, needs in zip(
                self._requests, self._grants, self._needs, strict=True
            )
        ]

    def unavailable(self, reason: str) -> list[BrokerConfigDecision]:
        """The topics could not be read: deny the resources that needed them (fail closed)."""
        message = (
            f"[{CLUSTER_STATE_RULE}] the proxy cannot read the cluster state ({bounded(reason)}); "
            "denied because the new topic-config default cannot be checked against the topics"
        )
        decisions = self.decide(NO_FACTS)
        return [
            replace(
                decision,
                allowed=False,
                violations=(*decision.violations, Violation(CLUSTER_STATE_RULE, message)),
            )
            if needs
            else decision
            for decision, needs in zip(decisions, self._needs, strict=True)
        ]


def judge_broker_configs(
    policy: CompiledPolicy, requests: Sequence[BrokerConfigRequest], source: FactSource
) -> list[BrokerConfigDecision]:
    """Judge a request's non-topic config resources against a synchronous fact source."""
    judgement = BrokerConfigJudgement(policy, requests)
    try:
        facts = source.read(judgement.query) if judgement.query.facts else NO_FACTS
    except (FactsUnavailable, FactsNotRecorded) as exc:
        return judgement.unavailable(str(exc))
    return judgement.decide(facts)


def judge_admin(policy: CompiledPolicy, request: AdminRequest) -> AdminDecision:
    """Judge one cluster or security mutation API call: denied unless `admin_apis` allows it."""
    return decide_admin(policy.document, request)


@dataclass(frozen=True, slots=True)
class ClusterFacts:
    """A `FactSource` over a cluster held in memory (a described cluster, a snapshot file).

    It answers as the proxy's live cache does: every fact the query names is read from the
    cluster and folded into the requests.
    """

    cluster: ClusterState

    def read(self, query: FactQuery) -> Facts:
        """The cluster, with the queried facts to fold in."""
        return Facts(self.cluster, query.facts) if query.facts else NO_FACTS


def aware(now: datetime | None) -> datetime | None:
    """`now` as given, refused if naive: a naive time is a different instant on every host."""
    if now is not None and now.tzinfo is None:
        raise ValueError("the judge's `now` must be timezone-aware")
    return now


def bounded(reason: str) -> str:
    """The reason, cut to MAX_REASON_CHARS characters with a count of what was left out."""
    if len(reason) <= MAX_REASON_CHARS:
        return reason
    return f"{reason[:MAX_REASON_CHARS]}... ({len(reason) - MAX_REASON_CHARS} more characters)"


def _denied(request: TopicRequest, message: str, rule: str = CLUSTER_STATE_RULE) -> Verdict:
    violation = Violation(rule, message, Mode.ENFORCE)
    return Verdict(request, Decision(request.name, request.action, False, (violation,)))


def _unknown_topic(request: TopicRequest) -> Verdict:
    """A change to a topic the facts show missing: the broker's own answer, not a rule's."""
    message = (
        f"[{UNKNOWN_TOPIC_RULE}] topic {request.name!r} does not exist "
        "(not in the cluster metadata the proxy read)"
    )
    return _denied(request, message, UNKNOWN_TOPIC_RULE)


def overrides_refused(verdict: Verdict, cannot: str, advice: str) -> Verdict:
    """Deny a create whose path cannot carry the policy's overrides (auto-creation, a Streams
    topology: nothing to rewrite), saying why; any other verdict is returned as it is."""
    decision = verdict.decision
    if decision is None or not decision.overrides:
        return verdict
    rule = decision.overrides[0].rule
    targets = ", ".join(dict.fromkeys(o.target for o in decision.overrides))
    message = (
        f"[{rule}] topic {decision.topic!r}: {cannot} cannot apply the policy's overrides "
        f"({targets}); {advice}"
    )
    violations = (*decision.violations, Violation(rule, message))
    denied = replace(decision, allowed=False, violations=violations)
    return replace(verdict, decision=denied)
