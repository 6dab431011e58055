"""The scan's judgement of one existing topic: a create of its current state, by the one judge.

Every topic of the snapshots is evaluated, on the executors, as if it were being created now
with its current state, in the cluster made of the other topics of its snapshot:

- a `create` request with the topic's partition count, replication factor and replica
  assignment. The assignment counts as placed by the broker: an existing topic's placement
  says nothing about how it was asked for (and reassignments move replicas anyway), so a rule
  with `explicit_assignment: false` flags no existing topic;
- the requested configs are the topic's effective configs; the configs *named* in the request
  are those set on the topic itself (source DYNAMIC_TOPIC_CONFIG). So `forbidden` and
  `required` look at what someone set on the topic, and a value check says "sets retention.ms
  to ..." for a topic override and "gets the broker default retention.ms = ..." otherwise.
  A snapshot without `config_sources` does not say which is which: its topics name every
  effective config, `required` and `forbidden` are not judged, and value checks say "has
  retention.ms = ...";
- existing topics have no creator principal: every topic is evaluated as one configurable
  principal (default User:ANONYMOUS), so rules whose `match` selects principals apply as they
  would to that principal;
- the cluster's topic names and total partitions exclude the topic under evaluation, so a
  cluster at exactly `max_topics` is not flagged and a topic does not count against its own
  partition budget; a cluster over a cluster-wide limit has every topic flagged by it (none
  could be created today). The other topics answer `topic()` with their metadata (no
  configs), as the proxy's all-topics read does. Broker count and defaults are the snapshot's.

Each topic also gets its owner (`policy.owners.owner_of`; `(unowned)` when no team of the
policy's `owners:` claims it), for the reports per team. It changes no decision.

Each topic is judged by the one judge (`policy.judge`) with a fact source that gives the
cluster of the other topics and folds nothing into the request (it already holds the topic's
state). What an override action would have changed at the topic's creation (a capped
partition count, a defaulted or forced config), the topic does not comply with.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import pandas as pd  # type: ignore[import-untyped]
from pyspark import Broadcast
from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType

from kafka_policy_proxy.pipeline.worker_cache import compiled, shipped_cluster
from kafka_policy_proxy.policy.builders import create_request
from kafka_policy_proxy.policy.cluster import ClusterState, InMemoryCluster
from kafka_policy_proxy.policy.decision_log import Outcome, outcome
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.judge import FactQuery, Facts, judge
from kafka_policy_proxy.policy.model import (
    ConfigSource,
    Principal,
    TopicRequest,
    TopicState,
    Violation,
)
from kafka_policy_proxy.policy.offline.snapshot_format import SET_ON_TOPIC, TopicLine, parse_line
from kafka_policy_proxy.policy.overlays import OtherTopics
from kafka_policy_proxy.policy.overrides import describe
from kafka_policy_proxy.policy.owners import UNOWNED, owner_of

COMPLIANT, VIOLATING, AUDIT_ONLY = "compliant", "violating", "audit-only"
# The record's decisions as the scan names them.
DECISIONS = {
    Outcome.ALLOWED: COMPLIANT,
    Outcome.DENIED: VIOLATING,
    Outcome.AUDIT_WOULD_DENY: AUDIT_ONLY,
}

VIOLATION = StructType(
    [
        StructField("rule", StringType()),
        StructField("mode", StringType()),
        StructField("message", StringType()),
    ]
)
EVALUATED = StructType(
    [
        StructField("cluster_id", StringType()),
        StructField("topic", StringType()),
        StructField("partitions", LongType()),
        StructField("replication_factor", LongType()),
        StructField("decision", StringType()),
        StructField("rules", ArrayType(StringType())),
        StructField("violations", ArrayType(VIOLATION)),
        StructField("owner", StringType()),
    ]
)


@dataclass(frozen=True, slots=True)
class AsIfCreated:
    """A `FactSource` for a topic judged as a create: the cluster of the other topics."""

    cluster: ClusterState
    name: str

    def read(self, query: FactQuery) -> Facts:
        """The other topics; nothing folded in (the request already holds the topic's state)."""
        return Facts(OtherTopics(self.cluster, self.name), frozenset())


def scan_request(
    topic: TopicState, sources: Mapping[str, str] | None, principal: Principal
) -> TopicRequest:
    """The topic as a CreateTopics request for its current state (see the module docstring)."""
    if sources is None:
        # Which were set on the topic is not known: every config named, judged on values only.
        named, config_source = sorted(topic.configs), ConfigSource.SNAPSHOT
    else:
        named = sorted(n for n, source in sources.items() if source == SET_ON_TOPIC)
        config_source = ConfigSource.CREATE
    request = create_request(
        topic.name,
        topic.partitions,
        topic.replication_factor,
        configs=[(n, topic.configs.get(n)) for n in named],
        principal=principal,
    )
    # The snapshot's effective configs are the truth: broker defaults the cluster line may not
    # list (static configs, synonyms) are already folded in.
    requested = replace(
        request.requested,
        assignment=topic.assignment,
        generated_assignment=True,
        configs=topic.configs,
        config_source=config_source,
    )
    return replace(request, requested=requested)


def scan_topic(
    policy: CompiledPolicy,
    cluster: ClusterState,
    line: TopicLine,
    principal: Principal,
    now: datetime | None = None,
) -> tuple[Any, ...]:
    """One topic line judged at the scan's instant `now`: a row of EVALUATED."""
    topic = line.state
    request = scan_request(topic, line.config_sources, principal)
    (verdict,) = judge(policy, (request,), AsIfCreated(cluster, topic.name), now=now)
    decision = verdict.decision
    assert decision is not None  # a create by name is always decided
    if decision.overrides:
        # The topic exists as it is: what the policy would have changed at its creation, it
        # does not comply with.
        changed = tuple(
            Violation(o.rule, f"[{o.rule}] {describe(topic.name, o)}") for o in decision.overrides
        )
        decision = replace(decision, allowed=False, violations=decision.violations + changed)
    violations = [
        {"rule": v.rule, "mode": v.mode.value, "message": v.message} for v in decision.violations
    ]
    return (
        line.cluster_id,
        topic.name,
        topic.partitions,
        topic.replication_factor,
        DECISIONS[outcome(decision)],
        list(dict.fromkeys(v.rule for v in decision.violations)),
        violations,
        owner_of(policy.document, topic.name, policy.budgets) or UNOWNED,
    )


def topic_evaluator(
    policy_text: str,
    policy_name: str,
    principal: str,
    clusters: Broadcast[dict[str, str]],
    now: datetime | None = None,
) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    """The mapInPandas function: (cluster_id, topic line) batches -> EVALUATED rows, judged
    at the scan's instant `now`."""

    def evaluate(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        # Compiled and rebuilt once per worker process, reused by every task and batch.
        policy = compiled(policy_text, policy_name)
        who = Principal(principal)
        # shipped_cluster hashes the whole text: look each cluster up once per task.
        rebuilt: dict[str, InMemoryCluster] = {}
        for batch in batches:
            rows = []
            for cluster_id, text in zip(batch["cluster_id"], batch["line"], strict=True):
                cluster = rebuilt.get(cluster_id)
                if cluster is None:
                    cluster = rebuilt[cluster_id] = shipped_cluster(clusters.value[cluster_id])
                line = parse_line(text)
                assert isinstance(line, TopicLine)  # only topic lines are sent here
                rows.append(scan_topic(policy, cluster, line, who, now))
            yield pd.DataFrame(rows, columns=EVALUATED.fieldNames())

    return evaluate
