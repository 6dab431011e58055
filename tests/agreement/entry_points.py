"""Every offline entry point's decision for each request of a corpus, side by side.

`outcomes_by_entry_point` maps an entry point's name to its results, keyed by corpus index
(or `existing:<topic>` for the scan of existing topics): the topic, the decision (an `Outcome`
value, or None when the entry point leaves the topic undecided) and the violated rule ids in
order. `reference` is `policy.judge` driven the way the proxy drives it; a proxy leg is one
more function of the same shape, added to ENTRY_POINTS.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]

from kafka_policy_proxy.pipeline.jobs.replay_batches import EPOCH, BatchJudge
from kafka_policy_proxy.pipeline.jobs.replayer import Replayer
from kafka_policy_proxy.pipeline.jobs.scan_evaluation import SET_ON_TOPIC, scan_topic
from kafka_policy_proxy.policy.builders import create_request
from kafka_policy_proxy.policy.cluster import InMemoryCluster, is_internal
from kafka_policy_proxy.policy.decision_log import Stamp, decision_record, outcome
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.judge import ClusterFacts, Verdict, judge
from kafka_policy_proxy.policy.model import Decision, Principal, TopicState
from kafka_policy_proxy.policy.offline.request_spec import AutoCreateSpec, RequestSpec
from kafka_policy_proxy.policy.offline.scenario import build_requests, evaluate_spec
from kafka_policy_proxy.policy.offline.snapshot_format import TopicLine

Key = int | str
# Every entry point judges at this instant; replay reads it from the records' `time`.
AGREEMENT_TIME = "2026-11-22T04:47:01.123456Z"
AGREEMENT_NOW = datetime(2026, 11, 22, 4, 47, 1, 123456, tzinfo=UTC)
Result = tuple[str | None, str | None, tuple[str, ...]]
Outcomes = dict[Key, Result]


@dataclass(frozen=True)
class Setting:
    """What every entry point is given: the policy, the cluster and the corpus."""

    policy: CompiledPolicy
    cluster: InMemoryCluster
    corpus: Sequence[RequestSpec]
    now: datetime = AGREEMENT_NOW

    @cached_property
    def verdicts(self) -> dict[int, Verdict | None]:
        """The reference verdicts, computed once: the replay and scan legs start from them."""
        return reference_verdicts(self)


def result(verdict: Verdict) -> Result:
    """A verdict as (topic, decision, rule ids)."""
    return _decided(verdict.decision) if verdict.decision else (verdict.request.name, None, ())


def _decided(decision: Decision) -> Result:
    return decision.topic, outcome(decision).value, tuple(v.rule for v in decision.violations)


def _single(verdicts: Sequence[Verdict]) -> Verdict | None:
    assert len(verdicts) <= 1, "the corpus has one topic per request"
    return verdicts[0] if verdicts else None


def reference_verdicts(setting: Setting) -> dict[int, Verdict | None]:
    """policy.judge, as the proxy drives it: one batch per request over the cluster's facts."""
    policy, cluster, source = setting.policy, setting.cluster, ClusterFacts(setting.cluster)
    verdicts: dict[int, Verdict | None] = {}
    for index, spec in enumerate(setting.corpus):
        who = Principal(spec.principal, spec.client_id, spec.client_address)
        if isinstance(spec, AutoCreateSpec):
            # Metadata auto-creation: the proxy judges only the names the cluster lacks.
            requests = [
                create_request(t.name, principal=who)
                for t in spec.topics
                if cluster.topic(t.name) is None
            ]
        else:
            requests = build_requests(spec, cluster)
        verdicts[index] = _single(judge(policy, requests, source, now=setting.now))
    return verdicts


def reference(setting: Setting) -> Outcomes:
    """The judge's results, plus each existing topic created in the cluster of the others."""
    results: Outcomes = {i: result(v) for i, v in setting.verdicts.items() if v is not None}
    cluster = setting.cluster
    for topic in _scanned(cluster):
        others = InMemoryCluster(
            tuple(t for t in cluster.topics if t.name != topic.name),
            cluster.brokers,
            cluster.defaults,
        )
        request = create_request(
            topic.name,
            topic.partitions,
            topic.replication_factor,
            configs=_overrides(topic, cluster).items(),
            principal=Principal(),
        )
        (verdict,) = judge(setting.policy, [request], ClusterFacts(others), now=setting.now)
        results[f"existing:{topic.name}"] = result(verdict)
    return results


def policy_eval(setting: Setting) -> Outcomes:
    """`policy eval` / `policy test`: the scenario path."""
    results: Outcomes = {}
    for index, spec in enumerate(setting.corpus):
        verdict = _single(evaluate_spec(setting.policy, spec, setting.cluster, now=setting.now))
        if verdict is not None:
            results[index] = result(verdict)
    return results


def _records(setting: Setting) -> dict[int, dict[str, Any]]:  # the same for both replays
    """The audit records of the decided requests, as JSON would carry them."""
    records = {}
    for index, verdict in setting.verdicts.items():
        if verdict is None or verdict.decision is None:
            continue  # the proxy records no event for what it leaves to the broker
        record = decision_record(
            verdict.request,
            verdict.decision,
            Stamp(
                time=AGREEMENT_TIME,
                decision_id=f"{index:032x}",
                policy_revision=setting.policy.revision,
                cluster_id="agreement",
                proxy_id="proxy-1",
                conn=1,
                client="10.0.0.1:5000",
                api="any",
                api_key=0,
                api_version=0,
            ),
        )
        records[index] = json.loads(json.dumps(record, separators=(",", ":")))
    return records


def _replay(setting: Setting, snapshot: InMemoryCluster | None) -> Outcomes:
    # As the replay's UDF judges a batch of records without typed columns: the texts, each
    # distinct request (with its in-use facts, at its time) once.
    records = _records(setting)
    texts = [json.dumps(r["request"], separators=(",", ":")) for r in records.values()]
    in_use = [json.dumps(r["in_use"]) if "in_use" in r else None for r in records.values()]
    micros = [
        (datetime.fromisoformat(r["time"]) - EPOCH) // timedelta(microseconds=1)
        for r in records.values()
    ]
    judge = BatchJudge(Replayer(setting.policy, snapshot))
    rows, _ = judge.judge(None, pa.array(texts), pa.array(micros, pa.int64()), pa.array(in_use))
    return {
        index: (record["topic"], decision, tuple(rules))
        for (index, record), (decision, rules, *_) in zip(records.items(), rows, strict=True)
    }


def replay_with_snapshot(setting: Setting) -> Outcomes:
    """The what-if replay of the recorded events, with the same policy and a snapshot."""
    return _replay(setting, setting.cluster)


def replay_without_snapshot(setting: Setting) -> Outcomes:
    """The replay from the events alone: `unknown` where a fact was never recorded."""
    return _replay(setting, None)


def scan(setting: Setting) -> Outcomes:
    """The compliance scan: existing topics, and each create as if its topic now existed."""
    cluster = setting.cluster
    results: Outcomes = {}
    for topic in _scanned(cluster):
        sources = dict.fromkeys(_overrides(topic, cluster), SET_ON_TOPIC)
        results[f"existing:{topic.name}"] = _scan_row(setting, cluster, topic, sources, Principal())
    for index, verdict in setting.verdicts.items():
        created = _created(verdict, cluster)
        if verdict is None or created is None:
            continue
        named = dict.fromkeys(verdict.request.requested.named, SET_ON_TOPIC)
        with_it = InMemoryCluster((*cluster.topics, created), cluster.brokers, cluster.defaults)
        row = _scan_row(setting, with_it, created, named, verdict.request.principal)
        results[index] = row
    return results


def _scan_row(
    setting: Setting,
    cluster: InMemoryCluster,
    topic: TopicState,
    sources: dict[str, str],
    principal: Principal,
) -> Result:
    line = TopicLine("agreement", topic, sources)
    row = scan_topic(setting.policy, cluster, line, principal, setting.now)
    decision = {"compliant": "allowed", "violating": "denied", "audit-only": "audit-would-deny"}
    return row[1], decision[row[4]], tuple(v["rule"] for v in row[6])


def _created(verdict: Verdict | None, cluster: InMemoryCluster) -> TopicState | None:
    """The topic a create would make, when the scan can stand for it: a new name, a placement
    left to the broker (the scan counts every placement as the broker's), a known size."""
    if verdict is None or verdict.decision is None or verdict.request.action.value != "create":
        return None
    request, requested = verdict.request, verdict.request.requested
    if cluster.topic(request.name or "") is not None or not requested.generated_assignment:
        return None
    if requested.partitions is None or requested.replication_factor is None:
        return None
    if is_internal(request.name):
        return None  # the scan skips internal topics
    return TopicState(
        name=request.name or "",
        partitions=requested.partitions,
        replication_factor=requested.replication_factor,
        configs=requested.configs,
    )


def _scanned(cluster: InMemoryCluster) -> list[TopicState]:
    return [t for t in cluster.topics if not is_internal(t.name, t.internal)]


def _overrides(topic: TopicState, cluster: InMemoryCluster) -> dict[str, str | None]:
    """The configs set on the topic: those that differ from the broker defaults."""
    defaults = cluster.defaults
    return {k: v for k, v in topic.configs.items() if defaults.get(k) != v}


ENTRY_POINTS: dict[str, Callable[[Setting], Outcomes]] = {
    "reference": reference,
    "policy eval": policy_eval,
    "replay": replay_with_snapshot,
    "replay without snapshot": replay_without_snapshot,
    "scan": scan,
}


def outcomes_by_entry_point(setting: Setting) -> dict[str, Outcomes]:
    """Each entry point's (topic, decision, rule ids) per corpus key."""
    return {name: run(setting) for name, run in ENTRY_POINTS.items()}
