"""One recorded request judged again: the candidate policy's decision, and why it is unknown.

`Replayer.replay` takes a decision record's `request` as JSON text (and its `in_use`, the
in-use facts the decision saw, if any), reads it back (`policy.decision_reader`);
`Replayer.judge` takes the request already read (from the text, or from the lake's typed
columns: `pipeline.jobs.replay_batches`). Either judges it with the one judge
(`policy.judge`), as the proxy would have with the candidate policy, using the facts the
event recorded (`policy.offline.recorded_facts.RecordedFacts`) and, if given, a snapshot's
cluster:

- a topic request: facts the candidate needs that the event lacks (cluster-wide facts are
  never recorded) make the new decision `unknown`, with the facts named, unless the snapshot
  supplies them; the event's own topic state wins over the snapshot's, and a non-create whose
  topic the snapshot lacks is `unknown-topic`, as the proxy answers it;
- an admin API call: the candidate's `admin_apis`, which read no cluster facts;
- a change of a config resource that is not a topic: the candidate's `broker_configs`
  (`BrokerConfigJudgement`); a new topic-config default it grants, of a key its topic rules
  check, is also checked against every topic that inherits it: no event records every topic,
  so it is `unknown` without a snapshot, and judged against the snapshot's topics with one;
- a request refused before any judgement (sent before SASL authentication completed) stays
  denied: no policy changes that;
- a summary record (a request of more topics than audit.max_records_per_request) recorded
  only counts and a few topic names, not the topics' requests: it is `unknown`, "not
  replayable" (NOT_REPLAYABLE), which the replay summary counts among its unknown reasons.

A topic request is judged at the instant its event recorded (`time`): the candidate's
exceptions waive as they would have then, so a replay of last month's events does not count an
exception since expired as a flip.

A request that cannot be read or judged is an `error`, with the reason. Pure Python: the
Spark job calls it on the executors, batch by batch (`pipeline.jobs.replay_evaluation`).
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime

from kafka_policy_proxy.policy.admin_apis import AdminDecision, AdminRequest
from kafka_policy_proxy.policy.broker_configs import BrokerConfigDecision, BrokerConfigRequest
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.decision_log import (
    Outcome,
    is_unknown_topic,
    outcome,
    refusal_violation,
)
from kafka_policy_proxy.policy.decision_reader import (
    RecordedRequest,
    Refusal,
    RequestReader,
    Summarised,
)
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.judge import (
    NO_FACTS,
    BrokerConfigJudgement,
    ClusterFacts,
    FactsNotRecorded,
    Judgement,
    judge_admin,
)
from kafka_policy_proxy.policy.model import Decision, Fact, Mode, TopicRequest
from kafka_policy_proxy.policy.offline.recorded_facts import RecordedFacts, missing_facts
from kafka_policy_proxy.policy.usage import TopicUsage

UNKNOWN = "unknown"
ERROR = "error"
ALL_TOPICS_NOT_RECORDED = (
    "needs cluster facts: every topic's state (a new topic-config default); pass --snapshot"
)
ALL_TOPICS_FROM_SNAPSHOT = "cluster facts from the snapshot: every topic's state"
NOT_REPLAYABLE = (
    "not replayable: a summary record (one request's many topics: only counts and a sample "
    "were recorded)"
)

# The new decision, its violated rules, their messages, the enforce-mode ones, the reason.
Row = tuple[str, list[str], list[str], list[str], str | None]
_NONE: list[str] = []  # shared by every row without violations; never mutated
_ALLOWED = Outcome.ALLOWED.value
_DENIED = Outcome.DENIED.value


class Replayer:
    """Replays recorded requests through the judge with the candidate policy and the snapshot."""

    def __init__(self, policy: CompiledPolicy, cluster: InMemoryCluster | None) -> None:
        self.policy = policy
        self.cluster = cluster
        self._reasons: dict[frozenset[Fact], str] = {}
        self._reader = RequestReader()

    def replay(
        self, text: str | None, time: datetime | None = None, in_use: str | None = None
    ) -> Row:
        """One request's JSON text (and its event's `in_use` JSON), judged at its event's
        `time` -> new decision, rules, messages, denying rules, reason."""
        try:
            if text is None:
                raise ValueError("the event has no request")
            request = self._reader.read(text)
        except Exception as exc:
            return error_row(exc)
        return self.judge(request, time, in_use)

    def judge(
        self, request: RecordedRequest, time: datetime | None = None, in_use: str | None = None
    ) -> Row:
        """One recorded request (read from its text or typed columns), judged at `time` with
        its event's `in_use` JSON -> new decision, rules, messages, denying rules, reason."""
        try:
            if isinstance(request, Refusal):
                violation = refusal_violation(request.api, request.sasl_state)
                rules = [violation.rule]
                return (_DENIED, rules, [violation.message], rules, "refused before any judgement")
            if isinstance(request, Summarised):
                return (UNKNOWN, _NONE, _NONE, _NONE, NOT_REPLAYABLE)
            if isinstance(request, AdminRequest):
                # An admin API call needs no cluster facts: the candidate's admin_apis decide.
                return _row(judge_admin(self.policy, request), None)
            if isinstance(request, BrokerConfigRequest):
                return self._broker_config(request)
            if in_use is not None and in_use != "null":
                request = replace(request, usage=TopicUsage.from_dict(json.loads(in_use)))
            return self._topic(request, time)
        except Exception as exc:
            return error_row(exc)

    @property
    def reader(self) -> RequestReader:
        """The request reader, whose caches of parsed states the typed columns share."""
        return self._reader

    def _topic(self, request: TopicRequest, time: datetime | None) -> Row:
        judgement = Judgement(self.policy, (request,), now=time)
        try:
            facts = RecordedFacts(request, self.cluster).read(judgement.query)
        except FactsNotRecorded as exc:
            return (UNKNOWN, _NONE, _NONE, _NONE, str(exc))
        (verdict,) = judgement.decide(facts)
        if verdict.decision is None:
            return (UNKNOWN, _NONE, _NONE, _NONE, verdict.reason)
        reason = None
        if self.cluster is not None:
            reason = self._reason(request, judgement.query.facts, verdict.decision)
        return _row(verdict.decision, reason)

    def _broker_config(self, request: BrokerConfigRequest) -> Row:
        """A non-topic config change: the candidate's grants, and the topics if a default."""
        judgement = BrokerConfigJudgement(self.policy, (request,))
        if not judgement.query.facts:
            (decision,) = judgement.decide(NO_FACTS)
            return _row(decision, None)
        # Every topic's state: never in an event, so only a snapshot can say.
        if self.cluster is None:
            return (UNKNOWN, _NONE, _NONE, _NONE, ALL_TOPICS_NOT_RECORDED)
        (decision,) = judgement.decide(ClusterFacts(self.cluster).read(judgement.query))
        return _row(decision, ALL_TOPICS_FROM_SNAPSHOT)

    def _reason(
        self, request: TopicRequest, needs: frozenset[Fact], decision: Decision
    ) -> str | None:
        """Which facts the snapshot supplied, if any."""
        if is_unknown_topic(decision):
            return "the topic is not in the snapshot"
        missing = missing_facts(request, needs) if needs else needs
        if not missing:
            return None
        reason = self._reasons.get(missing)
        if reason is None:
            names = ", ".join(sorted(f.value for f in missing))
            reason = self._reasons[missing] = f"cluster facts from the snapshot: {names}"
        return reason


def error_row(exc: Exception) -> Row:
    """The row of a request that cannot be read or judged, naming the exception."""
    return (ERROR, _NONE, _NONE, _NONE, f"cannot replay: {type(exc).__name__}: {exc}")


def _row(decision: Decision | AdminDecision | BrokerConfigDecision, reason: str | None) -> Row:
    violations = decision.violations
    if not violations:
        return (_ALLOWED, _NONE, _NONE, _NONE, reason)
    return (
        outcome(decision).value,
        [v.rule for v in violations],
        [v.message for v in violations],
        [v.rule for v in violations if v.mode is Mode.ENFORCE],
        reason,
    )
