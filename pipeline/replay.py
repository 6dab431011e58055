"""The `replay` job: if this candidate policy had been in place, which decisions would change?

Every recorded per-topic request is evaluated again with the candidate policy, in Python on the
executors (an Arrow UDF over the raw request JSON), and compared with the recorded decision.
A recorded admin API call (`action: admin_api`, no topic) is judged again by the candidate's
`admin_apis` rules, which read no cluster facts. A request the proxy refused before any
judgement (sent before SASL authentication completed) stays denied: no policy changes that.
A recorded change of a config resource that is not a topic (`action: alter_broker_config`: a
broker, the cluster default, a logger, a group, client metrics) is judged again by the judge's
`BrokerConfigJudgement` with the candidate's `broker_configs` rules. A new topic-config
default the candidate grants, of a key its topic rules check, is also checked against every
topic that inherits it: no event records every topic, so it is `unknown` without a snapshot,
and judged against the snapshot's topics (their overrides from its config sources) with one.

Each request is judged by the one judge (`policy.judge`) with the facts its event recorded
(`policy.offline.recorded_facts.RecordedFacts`): facts the candidate needs that the event lacks
(cluster-wide facts are never recorded) make the new decision `unknown`, with the facts named
in `reason`, unless a snapshot supplies them; the event's own topic state wins over the
snapshot's, and a non-create whose topic the snapshot lacks is denied by `cluster-state`, as
the proxy denies it. Events of schema 1 carry no cluster id, so exactly one snapshot is
taken: several (of several clusters, or of one cluster at several times) are refused rather
than matched to events by guesswork.

A request that cannot be parsed or evaluated becomes `error`, with the reason; none is dropped.

Outputs under `out/` (Parquet, overwritten), plus `replay.html` and `summary.json`:

- `decisions`: time, principal, client_id, api, action, resource_type, resource, topic,
  validate_only, old_decision, old_rules, new_decision, new_rules, new_messages, flip,
  flip_rules, reason. `resource_type` and `resource` are the record's (a schema 1 record's are
  `topic` and its topic); `topic` is null for records of no topic. Decisions are the
  audit log's (allowed, denied, audit-would-deny) plus `unknown` and `error`. `flip` is
  `allow->deny`, `deny->allow`, `none`, `unknown` or `error`; audit-would-deny counts as allowed
  (the request went through). `flip_rules` are the rules behind a flip: for allow->deny the
  candidate's enforce-mode violations, for deny->allow the recorded enforce-mode violations
  (which no longer deny); empty otherwise.
- `flips`: flip, rule, principal, requests: allow->deny and deny->allow requests per rule in
  `flip_rules` and principal (a request flipped by two rules counts once for each).
- `malformed`: source, problem, lines: audit lines that are not good events.

`summary.json` (also returned): requests, actions (requests per recorded action), unchanged
(flip none), rules_changed (of those, the ones whose violated rules differ), allow_to_deny,
deny_to_allow, unknown, errors, malformed_lines, new_decisions, unknown_reasons, the policy,
the snapshot and the outputs.
The evaluating pass runs once: its counts are observed on the way, and the input is read a
second time only when there are malformed lines to group by file and reason.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.functions import arrow_udf

from pipeline.audit_events import (
    ACTIONS,
    AuditInput,
    line_counts,
    line_summary,
    resource,
    resource_type,
)
from pipeline.html_report import Chart, Report, Table, bar_chart, percent, utc
from pipeline.lake import AuditSource, as_source
from pipeline.output import write_report, write_text
from pipeline.snapshots import SnapshotError, read_clusters, read_snapshot_lines
from pipeline.worker_cache import cluster_json, compiled, shipped_cluster
from policy.admin_apis import AdminDecision, AdminRequest
from policy.broker_configs import BrokerConfigDecision, BrokerConfigRequest
from policy.cluster import InMemoryCluster
from policy.decision_log import PASSED, Outcome, outcome, refusal_violation
from policy.engine import CompiledPolicy
from policy.judge import (
    CLUSTER_STATE_RULE,
    NO_FACTS,
    BrokerConfigJudgement,
    ClusterFacts,
    FactsNotRecorded,
    Judgement,
    judge_admin,
)
from policy.model import (
    Action,
    AlterKind,
    Decision,
    Fact,
    Mode,
    Principal,
    RequestedState,
    TopicRequest,
    TopicState,
)
from policy.offline.recorded_facts import RecordedFacts, missing_facts

UNKNOWN = "unknown"
ERROR = "error"
ALLOW_TO_DENY = "allow->deny"
DENY_TO_ALLOW = "deny->allow"
NO_FLIP = "none"
ALLOWED = tuple(o.value for o in Outcome if o in PASSED)
NEW_DECISIONS = (*(o.value for o in Outcome), UNKNOWN, ERROR)
FLIPS = (NO_FLIP, ALLOW_TO_DENY, DENY_TO_ALLOW, UNKNOWN, ERROR)
BAD_LINES_SCHEMA = "source string, kind string, problem string, lines long"
TABLES = ("decisions", "flips", "bad_lines")
SAMPLE_ROWS = 10  # the flipped requests shown; all of them are in `decisions`
TABLE_ROWS = 10
CHART_RULES = 20

RESULT = pa.struct(
    [
        pa.field("decision", pa.string()),
        pa.field("rules", pa.list_(pa.string())),
        pa.field("messages", pa.list_(pa.string())),
        pa.field("denying", pa.list_(pa.string())),
        pa.field("reason", pa.string()),
    ]
)
RESULT_DDL = (
    "decision string, rules array<string>, messages array<string>, denying array<string>, "
    "reason string"
)

Row = tuple[str, list[str], list[str], list[str], str | None]
_REQUESTED = ',"requested":'
_CURRENT = ',"current":'
_NO_OFFSETS = ',"record_offsets":[]}'
# Enum lookups by value without EnumType.__call__, which costs more than the rest of a field.
_ACTIONS = {a.value: a for a in Action}
_ALTER_KINDS = {k.value: k for k in AlterKind}
_NONE: list[str] = []  # shared by every row without violations; never mutated
_ALLOWED = Outcome.ALLOWED.value
_ADMIN_API = '{"api":'  # an admin API call's request (`AdminRequest.to_dict()`)
_REFUSED = '{"refused":'  # a request refused before any judgement (`refusal_record`)
_DENIED = Outcome.DENIED.value
# A non-topic config resource's request (`BrokerConfigRequest.to_dict()`, then rules, outside).
_BROKER_CONFIG = '{"config_resource":'
ALL_TOPICS_NOT_RECORDED = (
    "needs cluster facts: every topic's state (a new topic-config default); pass --snapshot"
)
ALL_TOPICS_FROM_SNAPSHOT = "cluster facts from the snapshot: every topic's state"


class RequestParser:
    """Request JSON text -> TopicRequest, parsing each distinct requested and current state once.

    Most of a request's text is its requested and current states, and few distinct ones recur
    across many events. The proxy writes the keys in `TopicRequest.to_dict()` order, so these
    parts are cut out of the text at their keys and parsed once per distinct text (bounded
    caches). A cut is trusted only if each part parses as exactly one JSON object (a cut
    inside a value leaves unbalanced braces); anything else (another key order, extra keys,
    record offsets) is parsed whole by `TopicRequest.from_dict`, which gives the same request.
    """

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._requested: dict[str, RequestedState] = {}
        self._current: dict[str, TopicState | None] = {"null": None}

    def parse(self, text: str) -> TopicRequest:
        """Parse one request's JSON text."""
        if text.endswith(_NO_OFFSETS):
            end = len(text) - len(_NO_OFFSETS)
            at_current = text.rfind(_CURRENT, 0, end)
            at_requested = text.rfind(_REQUESTED, 0, at_current)
            if at_requested > 0:
                try:
                    head = _object(text[:at_requested] + "}")
                    requested = self._requested_state(
                        text[at_requested + len(_REQUESTED) : at_current]
                    )
                    current = self._current_state(text[at_current + len(_CURRENT) : end])
                    # The other fields as TopicRequest.from_dict reads them.
                    kind = head.get("alter_kind")
                    return TopicRequest(
                        topic=head.get("topic"),
                        action=_ACTIONS[head["action"]],
                        principal=Principal.from_dict(head.get("principal") or {}),
                        topic_id=head.get("topic_id"),
                        alter_kind=None if kind is None else _ALTER_KINDS[kind],
                        validate_only=head.get("validate_only", False),
                        requested=requested,
                        current=current,
                    )
                except (ValueError, TypeError, AttributeError, KeyError):
                    pass  # not cut at the top-level keys, or not valid: parse it whole
        return TopicRequest.from_dict(json.loads(text))

    def _requested_state(self, text: str) -> RequestedState:
        requested = self._requested.get(text)
        if requested is None:
            requested = RequestedState.from_dict(_object(text))
            self._store(self._requested, text, requested)
        return requested

    def _current_state(self, text: str) -> TopicState | None:
        try:
            return self._current[text]
        except KeyError:
            current = TopicState.from_dict(_object(text))
            self._store(self._current, text, current)
            return current

    def _store(self, cache: dict[str, Any], key: str, value: Any) -> None:
        if len(cache) >= self._size:
            cache.clear()  # a new working set: start over rather than track recency
        cache[key] = value


def _object(text: str) -> dict[str, Any]:
    data = json.loads(text)
    if not isinstance(data, dict):
        raise TypeError("not a JSON object")
    return data


class Replayer:
    """Replays recorded requests through the judge with the candidate policy and the snapshot."""

    def __init__(self, policy: CompiledPolicy, cluster: InMemoryCluster | None) -> None:
        self.policy = policy
        self.cluster = cluster
        self._reasons: dict[frozenset[Fact], str] = {}
        self._parser = RequestParser()

    def replay(self, text: str | None) -> Row:
        """One request's JSON text -> new decision, rules, messages, denying rules, reason."""
        try:
            if text is None:
                raise ValueError("the event has no request")
            if text.startswith(_REFUSED):
                refused = _object(text)
                violation = refusal_violation(refused["api"], refused["sasl_state"])
                rules = [violation.rule]
                return (_DENIED, rules, [violation.message], rules, "refused before any judgement")
            if text.startswith(_ADMIN_API):
                # An admin API call needs no cluster facts: the candidate's admin_apis decide.
                admin = AdminRequest.from_dict(_object(text))
                return _row(judge_admin(self.policy, admin), None)
            if text.startswith(_BROKER_CONFIG):
                return self._broker_config(BrokerConfigRequest.from_dict(_object(text)))
            request = self._parser.parse(text)
            judgement = Judgement(self.policy, (request,))
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
        except Exception as exc:
            return (ERROR, _NONE, _NONE, _NONE, f"cannot replay: {type(exc).__name__}: {exc}")

    def batch(self, texts: pa.Array) -> pa.StructArray:
        """Replay a batch of request JSON texts."""
        decisions: list[str] = []
        rules: list[list[str]] = []
        messages: list[list[str]] = []
        denying: list[list[str]] = []
        reasons: list[str | None] = []
        replay = self.replay
        for text in texts.to_pylist():
            decision, rule, message, deny, reason = replay(text)
            decisions.append(decision)
            rules.append(rule)
            messages.append(message)
            denying.append(deny)
            reasons.append(reason)
        columns = [decisions, rules, messages, denying, reasons]
        return pa.StructArray.from_arrays(
            [pa.array(c, f.type) for c, f in zip(columns, RESULT, strict=True)], fields=list(RESULT)
        )

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
        violations = decision.violations
        if violations and violations[0].rule == CLUSTER_STATE_RULE:
            return "the topic is not in the snapshot"
        missing = missing_facts(request, needs) if needs else needs
        if not missing:
            return None
        reason = self._reasons.get(missing)
        if reason is None:
            names = ", ".join(sorted(f.value for f in missing))
            reason = self._reasons[missing] = f"cluster facts from the snapshot: {names}"
        return reason


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


def replay_udf(
    policy_text: str, policy_name: str, cluster_text: str | None
) -> Callable[[Column], Column]:
    """The Arrow UDF: request JSON -> struct<decision, rules, messages, denying, reason>."""

    def replay(batches: Iterator[pa.Array]) -> Iterator[pa.Array]:
        # Compiled once per worker process and reused by every task and batch.
        cluster = None if cluster_text is None else shipped_cluster(cluster_text)
        replayer = Replayer(compiled(policy_text, policy_name), cluster)
        for texts in batches:
            yield replayer.batch(texts)

    # The kind (iterator of arrays) comes from the type hints; the stubs only know it spelled out.
    return arrow_udf(replay, RESULT_DDL)  # type: ignore[call-overload, no-any-return]


def flip_column(old: Column, new: Column) -> Column:
    """allow->deny, deny->allow, none, or the new decision when it is unknown or error."""
    was, now = old.isin(*ALLOWED), new.isin(*ALLOWED)
    return (
        F.when(new.isin(UNKNOWN, ERROR), new)
        .when(was & ~now, F.lit(ALLOW_TO_DENY))
        .when(~was & now, F.lit(DENY_TO_ALLOW))
        .otherwise(F.lit(NO_FLIP))
    )


def replay_lines(
    spark: SparkSession,
    policy_text: str,
    policy_name: str,
    audit: AuditInput,
    cluster: str | None,
) -> DataFrame:
    """Every audit line: `problem` (null for a good event) and, for good ones, the decisions."""
    lines = audit.lines
    good = F.col("problem").isNull()
    evaluate = replay_udf(policy_text, policy_name, cluster)
    enforced = F.filter("violations", lambda v: v["mode"] == "enforce")
    staged = lines.select(
        "problem",
        "time",
        "principal",
        "client_id",
        "api",
        "action",
        resource_type().alias("resource_type"),
        resource().alias("resource"),
        "topic",
        "validate_only",
        F.col("decision").alias("old_decision"),
        F.col("violations.rule").alias("old_rules"),
        F.transform(enforced, lambda v: v["rule"]).alias("old_denying"),
        # Bad lines skip the evaluation (a null request comes back as an error, then dropped).
        evaluate(F.when(good, F.col("request"))).alias("new"),
    )
    flip = flip_column(F.col("old_decision"), F.col("new.decision"))
    no_rules = F.array().cast("array<string>")
    return staged.select(
        "problem",
        "time",
        "principal",
        "client_id",
        "api",
        "action",
        "resource_type",
        "resource",
        "topic",
        "validate_only",
        "old_decision",
        "old_rules",
        F.col("new.decision").alias("new_decision"),
        F.col("new.rules").alias("new_rules"),
        F.col("new.messages").alias("new_messages"),
        flip.alias("flip"),
        F.when(flip == ALLOW_TO_DENY, F.col("new.denying"))
        .when(flip == DENY_TO_ALLOW, F.col("old_denying"))
        .otherwise(no_rules)
        .alias("flip_rules"),
        F.col("new.reason").alias("reason"),
    )


DECISION_COLUMNS = (
    "time",
    "principal",
    "client_id",
    "api",
    "action",
    "resource_type",
    "resource",
    "topic",
    "validate_only",
    "old_decision",
    "old_rules",
    "new_decision",
    "new_rules",
    "new_messages",
    "flip",
    "flip_rules",
    "reason",
)


def flip_counts(decisions: DataFrame) -> DataFrame:
    """flip, rule, principal, requests: allow->deny and deny->allow by rule and principal."""
    return (
        decisions.where(F.col("flip").isin(ALLOW_TO_DENY, DENY_TO_ALLOW))
        .select("flip", "principal", F.explode_outer("flip_rules").alias("rule"))
        .groupBy("flip", "rule", "principal")
        .agg(F.count(F.lit(1)).alias("requests"))
        .orderBy("flip", F.desc("requests"), "rule", "principal")
        .coalesce(1)
    )


def run_replay(
    spark: SparkSession,
    policy_file: str,
    audit: AuditSource | Sequence[str],
    out: str,
    snapshots: Sequence[str] = (),
) -> dict[str, Any]:
    """Replay the audit logs with the candidate policy; write the outputs and return the summary."""
    policy_text = Path(policy_file).read_text(encoding="utf-8")
    compiled(policy_text, policy_file)  # PolicyError, naming the file, before any Spark work
    at = str(Path(policy_file).resolve())  # workers read Java policy jars beside it
    cluster_id, cluster = _snapshot_cluster(spark, snapshots)
    base = out.rstrip("/")
    outputs = {name: f"{base}/{name}" for name in TABLES}
    shipped = None if cluster is None else cluster_json(cluster)
    source = as_source(audit)
    audit_input = source.read(spark)
    lines = replay_lines(spark, policy_text, at, audit_input, shipped)
    # The one pass that evaluates: the decisions, with the counts observed on the way.
    observation = Observation()
    observed = lines.observe(observation, *_counts())
    decisions = observed.where(F.col("problem").isNull()).select(*DECISION_COLUMNS)
    decisions.write.mode("overwrite").parquet(outputs["decisions"])
    counts = {k: int(v) for k, v in observation.get.items()}
    bad = _bad_lines(spark, audit_input, counts["malformed"])
    bad.write.mode("overwrite").parquet(outputs["bad_lines"])
    written = spark.read.parquet(outputs["decisions"])
    flip_counts(written).write.mode("overwrite").parquet(outputs["flips"])
    facts = _collect_facts(spark, written, outputs)
    outputs["report"] = f"{base}/replay.html"
    outputs["summary"] = f"{base}/summary.json"
    summary = _summary(
        counts,
        facts,
        policy_file=policy_file,
        snapshots=snapshots,
        cluster_id=cluster_id,
        outputs=outputs,
    )
    write_report(spark, base, "replay", _html(facts, summary, source.label))
    write_text(spark, base, "summary.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary


def _counts() -> list[Column]:
    good = F.col("problem").isNull()
    flip, decision = F.col("flip"), F.col("new_decision")
    counts = [
        F.count_if(good).alias("requests"),
        F.count_if(~good).alias("malformed"),
        F.count_if(good & (flip == NO_FLIP) & (F.col("old_rules") != F.col("new_rules"))).alias(
            "rules_changed"
        ),
    ]
    counts += [F.count_if(good & (flip == f)).alias(f"flip:{f}") for f in FLIPS]
    counts += [F.count_if(good & (decision == d)).alias(f"new:{d}") for d in NEW_DECISIONS]
    counts += [F.count_if(good & (F.col("action") == a)).alias(f"action:{a}") for a in ACTIONS]
    return counts


def _bad_lines(spark: SparkSession, audit: AuditInput, count: int) -> DataFrame:
    """source, kind, problem, lines; the input is read again only if the replay saw any."""
    if not count:
        return spark.createDataFrame([], BAD_LINES_SCHEMA)
    return line_counts(audit).orderBy(F.desc("lines"), "source", "problem").coalesce(1)


def _snapshot_cluster(
    spark: SparkSession, snapshots: Sequence[str]
) -> tuple[str | None, InMemoryCluster | None]:
    if not snapshots:
        return None, None
    heads = (
        read_snapshot_lines(spark, snapshots)
        .where(F.col("kind") == "cluster")
        .select("source", "cluster_id")
        .collect()
    )
    found = ", ".join(sorted(f"{r['cluster_id']} ({r['source']})" for r in heads)) or "none"
    several = SnapshotError(
        f"replay needs exactly one snapshot, of one cluster (found: {found}): audit events "
        "carry no cluster id, so events cannot be matched to one of several snapshots; "
        "replay each cluster's audit logs with its own snapshot"
    )
    # Said before the snapshots' own checks, which refuse one cluster in two files as well.
    if len(heads) > 1:
        raise several
    clusters = read_clusters(spark, snapshots)
    if len(clusters) != 1:
        raise several
    ((cluster_id, cluster),) = clusters.items()
    return cluster_id, cluster


def _collect_facts(
    spark: SparkSession, decisions: DataFrame, outputs: dict[str, str]
) -> dict[str, Any]:
    by_rule = (
        spark.read.parquet(outputs["flips"])
        .groupBy("flip", "rule")
        .agg(F.sum("requests").alias("requests"), F.count(F.lit(1)).alias("principals"))
        .orderBy("flip", F.desc("requests"), "rule")
        .collect()
    )
    flipped = decisions.where(F.col("flip").isin(ALLOW_TO_DENY, DENY_TO_ALLOW))
    by_principal = (
        flipped.groupBy("flip", "principal")
        .agg(F.count(F.lit(1)).alias("requests"))
        .orderBy(F.desc("requests"), "flip", "principal")
        .limit(TABLE_ROWS)
        .collect()
    )
    by_resource = (
        flipped.groupBy("flip", "resource_type", "resource")
        .agg(F.count(F.lit(1)).alias("requests"))
        .orderBy(F.desc("requests"), "flip", "resource_type", "resource")
        .limit(TABLE_ROWS)
        .collect()
    )
    sample = (
        flipped.orderBy("time", "principal", "resource_type", "resource")
        .select(
            F.unix_micros("time").alias("micros"),
            "flip",
            "principal",
            "resource_type",
            "resource",
            "action",
            "old_rules",
            "new_messages",
        )
        .limit(SAMPLE_ROWS)
        .collect()
    )
    reasons = []
    for flip, limit in ((UNKNOWN, None), (ERROR, TABLE_ROWS)):
        # Unknown reasons name sets of facts, so they are few; error reasons quote bad values.
        counted = (
            decisions.where(F.col("flip") == flip)
            .groupBy("flip", "reason")
            .agg(F.count(F.lit(1)).alias("requests"))
            .orderBy(F.desc("requests"), "reason")
        )
        reasons += (counted if limit is None else counted.limit(limit)).collect()
    bad_lines = spark.read.parquet(outputs["bad_lines"]).collect()
    return {
        "by_rule": [r.asDict() for r in by_rule],
        "by_principal": [r.asDict() for r in by_principal],
        "by_resource": [r.asDict() for r in by_resource],
        "sample": [r.asDict() for r in sample],
        "reasons": [r.asDict() for r in reasons],
        "bad_lines": [r.asDict() for r in bad_lines],
    }


def _summary(
    counts: dict[str, int],
    facts: dict[str, Any],
    *,
    policy_file: str,
    snapshots: Sequence[str],
    cluster_id: str | None,
    outputs: dict[str, str],
) -> dict[str, Any]:
    reasons = [r for r in facts["reasons"] if r["flip"] == UNKNOWN]
    return {
        "policy": policy_file,
        "snapshot": {"paths": list(snapshots), "cluster_id": cluster_id} if snapshots else None,
        "requests": counts["requests"],
        "actions": {a: counts[f"action:{a}"] for a in ACTIONS},
        "unchanged": counts[f"flip:{NO_FLIP}"],
        "rules_changed": counts["rules_changed"],
        "allow_to_deny": counts[f"flip:{ALLOW_TO_DENY}"],
        "deny_to_allow": counts[f"flip:{DENY_TO_ALLOW}"],
        "unknown": counts[f"flip:{UNKNOWN}"],
        "errors": counts[f"flip:{ERROR}"],
        "lines": line_summary(counts["requests"], facts["bad_lines"]),
        "new_decisions": {d: counts[f"new:{d}"] for d in NEW_DECISIONS},
        "unknown_reasons": {r["reason"]: r["requests"] for r in reasons},
        "outputs": outputs,
    }


def _time(micros: int) -> str | None:
    return utc(datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=micros))


def _html(facts: dict[str, Any], summary: dict[str, Any], audit: str) -> Report:
    snapshot = summary["snapshot"]
    notes = [
        f"Candidate policy: {summary['policy']}. Input: {audit}.",
        "A flip compares whether the request would go through: audit-would-deny counts as "
        "allowed. allow->deny flips are attributed to the candidate's enforce-mode rules, "
        "deny->allow flips to the recorded enforce-mode rules that no longer deny.",
    ]
    if snapshot is None:
        notes.append(
            "No snapshot: requests for which the candidate needs cluster facts that audit "
            "events do not record (topic names, broker count, total partitions, a topic "
            "state or broker defaults the recorded policy did not fetch, or every topic's "
            "state for a new topic-config default) are unknown. Pass --snapshot to decide them."
        )
    else:
        notes.append(
            f"Cluster facts the events do not record come from the snapshot of cluster "
            f"{snapshot['cluster_id']} ({', '.join(snapshot['paths'])}); each event's own "
            "topic state wins over the snapshot's."
        )
    requests = summary["requests"]
    flips = summary["allow_to_deny"] + summary["deny_to_allow"]
    to_deny = [r for r in facts["by_rule"] if r["flip"] == ALLOW_TO_DENY]
    parts: list[Table | Chart] = [
        Table(
            f"Most affected topics and resources (the top {TABLE_ROWS})",
            ["flip", "resource", "requests", "share of requests"],
            [
                [
                    r["flip"],
                    f"{r['resource_type']} {r['resource']}".rstrip(),
                    r["requests"],
                    percent(r["requests"], requests),
                ]
                for r in facts["by_resource"]
            ],
            "no flips",
        ),
        Table(
            f"Most affected principals (the top {TABLE_ROWS})",
            ["flip", "principal", "requests", "share of requests"],
            [
                [r["flip"], r["principal"], r["requests"], percent(r["requests"], requests)]
                for r in facts["by_principal"]
            ],
            "no flips",
        ),
        Table(
            f"Most affected rules (the top {TABLE_ROWS}; all in flips/)",
            ["flip", "rule", "requests", "principals"],
            [
                [r["flip"], r["rule"], r["requests"], r["principals"]]
                for r in facts["by_rule"][:TABLE_ROWS]
            ],
            "no flips",
        ),
    ]
    if to_deny:
        top = to_deny[:CHART_RULES]
        parts.append(
            bar_chart(
                "allow->deny flips by rule",
                [r["rule"] or "(none)" for r in top],
                [r["requests"] for r in top],
                "requests that would be denied",
            )
        )
    parts += [
        Table(
            f"A sample of flipped requests (the first {SAMPLE_ROWS} by time; all in decisions/)",
            ["time", "flip", "principal", "resource", "action", "recorded rules", "new violations"],
            [
                [
                    _time(r["micros"]),
                    r["flip"],
                    r["principal"],
                    f"{r['resource_type']} {r['resource']}".rstrip(),
                    r["action"],
                    ", ".join(r["old_rules"]),
                    "; ".join(r["new_messages"]),
                ]
                for r in facts["sample"]
            ],
            "no flips",
        ),
        Table(
            f"Unknown and failed replays by reason (the top {TABLE_ROWS})",
            ["new decision", "reason", "requests"],
            [[r["flip"], r["reason"], r["requests"]] for r in facts["reasons"]],
            "every request was replayed",
        ),
        Table(
            "Lines that are not events, by file and reason",
            ["file", "kind", "reason", "lines"],
            [[r["source"], r["kind"], r["problem"], r["lines"]] for r in facts["bad_lines"]],
            "every line is an event",
        ),
    ]
    return Report(
        "Policy replay: what the candidate policy would change",
        figures=[
            ("would flip", percent(flips, requests)),
            ("allow->deny", _counted(summary["allow_to_deny"], requests)),
            ("deny->allow", _counted(summary["deny_to_allow"], requests)),
            ("requests", requests),
            ("unchanged", summary["unchanged"]),
            ("of which other rules", summary["rules_changed"]),
            ("unknown", _counted(summary["unknown"], requests)),
            ("errors", summary["errors"]),
            ("malformed lines", summary["lines"]["malformed"]),
            ("blank lines", summary["lines"]["blank"]),
            ("unknown schema versions", summary["lines"]["unknown_version"]),
        ],
        notes=notes,
        parts=parts,
    )


def _counted(count: int, total: int) -> str:
    return f"{count:,} ({percent(count, total)})"
