"""The `replay` job: if this candidate policy had been in place, which decisions would change?

Every recorded request is judged again with the candidate policy, in Python on the executors
(`pipeline.jobs.replay_evaluation`), by the one judge with the facts its event recorded
(`pipeline.jobs.replayer`, which says how each kind of record is judged and when the new
decision is `unknown`), and compared with the recorded decision. Events of schema 1 carry no
cluster id, so exactly one snapshot is taken: several (of several clusters, or of one cluster
at several times) are refused rather than matched to events by guesswork.

A request that cannot be parsed or evaluated becomes `error`, with the reason; none is dropped.

Outputs under `out/` (Parquet, overwritten), plus `replay.html`
(`pipeline.rendering.replay_page`) and `summary.json` (`pipeline.jobs.replay_summary`: the
flips with how many distinct requests, principals, topics and client ids they are, and the
judgement cache's lookups and hits):

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
- `bad_lines`: source, kind, problem, lines: audit lines that are not good events.

The evaluating pass runs once: its counts are observed on the way, and the input is read a
second time only when there are malformed lines to group by file and reason.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from kafka_policy_proxy.pipeline.jobs.replay_evaluation import (
    DECISION_COLUMNS,
    FLIPS,
    NEW_DECISIONS,
    NO_FLIP,
    flip_counts,
    replay_lines,
)
from kafka_policy_proxy.pipeline.jobs.replay_summary import replay_facts, replay_summary
from kafka_policy_proxy.pipeline.rendering.html_page import page_files
from kafka_policy_proxy.pipeline.rendering.replay_page import replay_page
from kafka_policy_proxy.pipeline.sources.audit_events import ACTIONS, AuditInput, line_counts
from kafka_policy_proxy.pipeline.sources.audit_source import AuditSource, as_source
from kafka_policy_proxy.pipeline.sources.hadoop_files import write_files, write_text
from kafka_policy_proxy.pipeline.sources.snapshots import (
    SnapshotError,
    read_clusters,
    read_snapshot_lines,
)
from kafka_policy_proxy.pipeline.worker_cache import cluster_json, compiled
from kafka_policy_proxy.policy.cluster import InMemoryCluster

BAD_LINES_SCHEMA = "source string, kind string, problem string, lines long"
TABLES = ("decisions", "flips", "bad_lines")


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
    lines = replay_lines(policy_text, at, audit_input, shipped)
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
    facts = replay_facts(spark, written, outputs, counts)
    outputs["report"] = f"{base}/replay.html"
    outputs["summary"] = f"{base}/summary.json"
    summary = replay_summary(
        counts,
        facts,
        policy_file=policy_file,
        snapshots=snapshots,
        cluster_id=cluster_id,
        outputs=outputs,
    )
    write_files(spark, base, page_files("replay", replay_page(facts, summary, source.label)))
    write_text(spark, base, "summary.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary


def _counts() -> list[Column]:
    good = F.col("problem").isNull()
    flip, decision = F.col("flip"), F.col("new_decision")
    counts = [
        F.count_if(good).alias("requests"),
        F.count_if(~good).alias("malformed"),
        F.count_if(good & F.col("cached")).alias("cache_hits"),
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
