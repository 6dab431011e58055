"""Each decision becomes one decision record for every audit sink; denials also go to the log.

A request judged for more topics than `max_records_per_request` is recorded as one summary
record instead (`policy.decision_summary`), and logged as one line: one request writes a
bounded audit and log whatever its size. Below that, each topic has its record, and the
request still one log line per outcome that is not plainly allowed (`policy denied`: how many
topics, the first `sample_size` with their decision ids, the topics per deciding rule). The
bytes written are charged to the principal's audit budget (`proxy.audit.budget`), which the
admission filter checks.

Every decision gets its id here, before its answer is built and whether or not a sink is
enabled: the filters end each denial message with it (`policy.decision_ids.cite`), the log
line of a decision that was not plainly allowed names it (among the first `sample_size` of its
request), and its record carries it. A
summary record's one id stands for every topic it summarises.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from kafka_policy_proxy.codec.errors import api_name
from kafka_policy_proxy.policy.admin_apis import AdminDecision
from kafka_policy_proxy.policy.broker_configs import BrokerConfigDecision
from kafka_policy_proxy.policy.decision_ids import new_decision_id
from kafka_policy_proxy.policy.decision_log import (
    Outcome,
    Stamp,
    admin_record,
    broker_config_record,
    decision_record,
    outcome,
    refusal_record,
    summary_record,
)
from kafka_policy_proxy.policy.decision_summary import summarise
from kafka_policy_proxy.policy.judge import Verdict
from kafka_policy_proxy.policy.model import Mode, Violation
from kafka_policy_proxy.proxy.audit.budget import ANONYMOUS, AuditBudget
from kafka_policy_proxy.proxy.audit.sink import AuditDeliveryError, AuditSink
from kafka_policy_proxy.proxy.filters.api import RequestContext
from kafka_policy_proxy.proxy.metrics import DECISIONS, count_waivers

log = structlog.get_logger("proxy.enforcement")

# The deliveries still to come of the records one call wrote (to the audit topic).
Written = list[Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Recorded:
    """The ids given to a call's decisions, in order (None for a verdict left undecided,
    which has no record), and the deliveries still to come of the records written."""

    ids: tuple[str | None, ...]
    written: Written


class DecisionRecorder:
    """Stamps each decision with its ids (decision, policy, cluster, proxy) and writes it."""

    def __init__(
        self,
        sinks: Sequence[AuditSink],
        *,
        proxy_id: str,
        cluster_id: Callable[[], str | None],
        closed: bool = False,
        max_records_per_request: int = 100,
        sample_size: int = 20,
        budget: AuditBudget | None = None,
    ) -> None:
        """`closed`: audit.on_failure: closed, mutations wait for the sinks that deliver later
        (and are refused if a sink could not keep their records)."""
        self._sinks = tuple(sinks)
        self._closed = closed
        self._max_records = max_records_per_request
        self._sample_size = sample_size
        self._budget = budget
        self._proxy_id = proxy_id
        self._cluster_id = cluster_id

    @property
    def budget(self) -> AuditBudget | None:
        """The per-principal audit budget this recorder charges: the admission filter checks
        `budget.allows(principal, client_address)` before a guarded request is judged."""
        return self._budget

    @property
    def waits_for_audit(self) -> bool:
        """Whether mutations wait until the audit topic has their records (on_failure: closed)."""
        return self._closed

    @property
    def _enabled(self) -> bool:
        return any(sink.enabled for sink in self._sinks)

    def _write(
        self, record: Mapping[str, Any], written: Written, ctx: RequestContext, principal: str
    ) -> None:
        if self._budget is not None:
            size = len(json.dumps(record, separators=(",", ":"), default=str))
            self._budget.charge(principal, size, ctx.client_address)
        for sink in self._sinks:
            delivery = sink.write(record)
            if delivery is not None:
                written.append(delivery)

    async def close(self) -> None:
        """Close every sink, in order (the audit topic delivers what it still holds, bounded)."""
        for sink in self._sinks:
            await sink.close()

    async def confirmed(self, written: Written) -> str | None:
        """With audit.on_failure: closed, wait until the audit topic has these records; the
        reason a mutation must be refused if it has not, else None."""
        if not self._closed or not written:
            return None
        try:
            await asyncio.gather(*written)
        except AuditDeliveryError as exc:
            return f"the audit log cannot be written (audit.on_failure: closed): {exc}"
        return None

    def _stamp(self, ctx: RequestContext, revision: str, decision_id: str) -> Stamp:
        """The decision's id and the trace fields, now."""
        return Stamp(
            time=timestamp(),
            decision_id=decision_id,
            policy_revision=revision,
            cluster_id=self._cluster_id(),
            proxy_id=self._proxy_id,
            conn=ctx.connection_id,
            client=ctx.client_address,
            api=api_name(ctx.api_key),
            api_key=ctx.api_key,
            api_version=ctx.api_version,
        )

    def record(self, ctx: RequestContext, revision: str, verdicts: Sequence[Verdict]) -> Recorded:
        """One id and record per decision made (an undecided topic has neither), or one id and
        summary record for them all if there are more than `max_records_per_request`."""
        decided = [v for v in verdicts if v.decision is not None]
        if len(decided) > self._max_records:
            summarised = self._record_summary(ctx, revision, decided)
            one = summarised.ids[0]
            ids = tuple(None if v.decision is None else one for v in verdicts)
            return Recorded(ids, summarised.written)
        written: Written = []
        minted: list[str | None] = []
        logged = _Logged()
        counts = _Counts(ctx)
        for verdict in verdicts:
            decision, request = verdict.decision, verdict.request
            if decision is None:
                minted.append(None)
                continue
            decision_id = new_decision_id()
            minted.append(decision_id)
            result = outcome(decision)
            rule = counts.add(request.action.value, result, decision.violations)
            if result is not Outcome.ALLOWED:
                logged.add(result, decision.topic, decision_id, rule)
            if decision.waived:
                count_waivers(w.exception for w in decision.waived)
                log.info(
                    "policy exception waived",
                    conn=ctx.connection_id,
                    principal=request.principal.name,
                    topic=decision.topic,
                    action=request.action.value,
                    waived=[w.to_dict() for w in decision.waived],
                )
            if decision.overrides:
                log.info(
                    "policy override",
                    conn=ctx.connection_id,
                    decision_id=decision_id,
                    principal=request.principal.name,
                    topic=decision.topic,
                    action=request.action.value,
                    overrides=[o.to_dict() for o in decision.overrides],
                )
            if self._enabled:
                stamp = self._stamp(ctx, revision, decision_id)
                original = verdict.original
                record = decision_record(original or request, decision, stamp, request)
                self._write(record, written, ctx, request.principal.name)
        counts.flush()
        if logged.outcomes:
            first = verdicts[0].request
            logged.log(ctx, first.principal.name, first.action.value, self._sample_size)
        return Recorded(tuple(minted), written)

    def _record_summary(
        self, ctx: RequestContext, revision: str, decided: Sequence[Verdict]
    ) -> Recorded:
        """Many decisions of one request: counted one by one, logged and recorded as one."""
        written: Written = []
        decision_id = new_decision_id()
        decisions = []
        overridden = 0
        counts = _Counts(ctx)
        for verdict in decided:
            decision = verdict.decision
            assert decision is not None
            decisions.append(decision)
            overridden += bool(decision.overrides)
            if decision.waived:
                count_waivers(w.exception for w in decision.waived)
            counts.add(verdict.request.action.value, outcome(decision), decision.violations)
        counts.flush()
        first = decided[0].original or decided[0].request
        summary = summarise(decisions, self._sample_size)
        if summary.decision is not Outcome.ALLOWED or overridden:
            log.info(
                f"policy {summary.decision} (summarised)",
                conn=ctx.connection_id,
                decision_id=decision_id,
                principal=first.principal.name,
                action=first.action.value,
                topics=len(decisions),
                overridden=overridden,
                counts=summary.fields["counts"],
                sample=[s["topic"] for s in summary.fields["sample"]],
            )
        if self._enabled:
            record = summary_record(
                first,
                self._stamp(ctx, revision, decision_id),
                decision=summary.decision,
                mode=summary.mode,
                violations=summary.violations,
                summary=summary.fields,
            )
            self._write(record, written, ctx, first.principal.name)
        return Recorded((decision_id,), written)

    def record_admin(self, ctx: RequestContext, revision: str, decision: AdminDecision) -> Recorded:
        """One id and record for an admin API call; anything but allowed also goes to the log."""
        written: Written = []
        decision_id = new_decision_id()
        result = outcome(decision)
        _count(ctx, "admin_api", result, decision.violations)
        if result is not Outcome.ALLOWED:
            log.info(
                f"policy {result}",
                conn=ctx.connection_id,
                decision_id=decision_id,
                principal=decision.request.principal.name,
                api=decision.request.api,
                action="admin_api",
                reasons=[v.message for v in decision.violations],
            )
        if self._enabled:
            record = admin_record(decision, self._stamp(ctx, revision, decision_id))
            self._write(record, written, ctx, decision.request.principal.name)
        return Recorded((decision_id,), written)

    def record_broker_configs(
        self, ctx: RequestContext, revision: str, decisions: Sequence[BrokerConfigDecision]
    ) -> Recorded:
        """One id and record per non-topic config resource; anything but allowed also goes to
        the log."""
        written: Written = []
        minted: list[str | None] = []
        for decision in decisions:
            request = decision.request
            decision_id = new_decision_id()
            minted.append(decision_id)
            result = outcome(decision)
            _count(ctx, "alter_broker_config", result, decision.violations)
            if result is not Outcome.ALLOWED:
                log.info(
                    f"policy {result}",
                    conn=ctx.connection_id,
                    decision_id=decision_id,
                    principal=request.principal.name,
                    resource=f"{request.resource.value}:{request.name}",
                    action="alter_broker_config",
                    reasons=[v.message for v in decision.violations],
                )
            if self._enabled:
                record = broker_config_record(decision, self._stamp(ctx, revision, decision_id))
                self._write(record, written, ctx, request.principal.name)
        return Recorded(tuple(minted), written)

    def record_refusal(self, ctx: RequestContext, revision: str, sasl_state: str) -> str:
        """One denied record for a request refused before SASL authentication completed;
        returns its id."""
        decision_id = new_decision_id()
        _count(ctx, "before_authentication", Outcome.DENIED, ())
        if self._enabled:
            record = refusal_record(
                self._stamp(ctx, revision, decision_id),
                client_id=ctx.client_id or "",
                listener=ctx.listener,
                sasl_state=sasl_state,
            )
            # A refusal changes nothing: never waited for. No principal was established.
            self._write(record, [], ctx, ANONYMOUS)
        return decision_id


class _Logged:
    """The decisions of one request that were not plainly allowed, by outcome: each outcome
    becomes ONE log line for the request (the detail of each topic is its audit record)."""

    __slots__ = ("outcomes",)

    def __init__(self) -> None:
        # outcome -> (topics, decision ids, topics per deciding rule)
        self.outcomes: dict[Outcome, tuple[list[str], list[str], dict[str, int]]] = {}

    def add(self, result: Outcome, topic: str, decision_id: str, rule: str) -> None:
        """One decision of this outcome, and the rule that decided it."""
        found = self.outcomes.get(result)
        if found is None:
            found = self.outcomes[result] = ([], [], {})
        topics, ids, rules = found
        topics.append(topic)
        ids.append(decision_id)
        rules[rule] = rules.get(rule, 0) + 1

    def log(self, ctx: RequestContext, principal: str, action: str, sample: int) -> None:
        """`policy <outcome>`: how many topics, the first `sample` of them with their decision
        ids, and how many each rule decided."""
        for result, (topics, ids, rules) in self.outcomes.items():
            log.info(
                f"policy {result}",
                conn=ctx.connection_id,
                principal=principal,
                action=action,
                topics=len(topics),
                sample=topics[:sample],
                decision_ids=ids[:sample],
                rules=rules,
            )


class _Counts:
    """The decision counter's increments for one request, added up and applied once per label
    set (a 1,000-topic batch has a few), not once per decision."""

    __slots__ = ("_added", "_api")

    def __init__(self, ctx: RequestContext) -> None:
        self._api = api_name(ctx.header.api_key)
        self._added: dict[tuple[str, Outcome, str], int] = {}

    def add(self, action: str, result: Outcome, violations: Sequence[Violation]) -> str:
        """One decision, under the rule that decided it (the first that denied; "" for none),
        which is returned."""
        rule = _deciding_rule(result, violations)
        key = (action, result, rule)
        self._added[key] = self._added.get(key, 0) + 1
        return rule

    def flush(self) -> None:
        """Apply what was added."""
        for (action, result, rule), count in self._added.items():
            _decisions(self._api, action, result.value.replace("-", "_"), rule).inc(count)
        self._added.clear()


def _deciding_rule(result: Outcome, violations: Sequence[Violation]) -> str:
    if not violations:
        return ""
    if result is Outcome.DENIED:
        for violation in violations:
            if violation.mode is Mode.ENFORCE:
                return violation.rule
        return ""
    return violations[0].rule


def _count(
    ctx: RequestContext, action: str, result: Outcome, violations: Sequence[Violation]
) -> None:
    """Count one decision under the rule that decided it."""
    counts = _Counts(ctx)
    counts.add(action, result, violations)
    counts.flush()


# The counter's child per label set, looked up once: a 1,000-topic batch counts 1,000 times.
# API names, actions, outcomes and rule names are few, so the cache stays small.
@functools.lru_cache(maxsize=4096)
def _decisions(api: str, action: str, decision: str, rule: str) -> Any:
    return DECISIONS.labels(api=api, action=action, decision=decision, rule=rule)


def timestamp() -> str:
    """Now, as RFC 3339 UTC with microseconds: the records' `time`."""
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"
