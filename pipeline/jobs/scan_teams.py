"""The scan's counts by owner, and its reports per team.

The scan aggregates by owner in Spark (`by_owner`) and collects rows bounded by the clusters,
owners and rules, plus each owner's first violations; the whole report is their sum, and each
team's report its own rows.

Outputs under `out/` (`pipeline.jobs.team_report` has the report's fields):

- `teams/<team>/report.json` and `report.html` for every team of the policy's `owners:`, in
  its order, then `teams/_unowned/` for the topics no team claims (`(unowned)`);
- `teams.json`: every team's summary and topic counts, and where its report is.

`teams/` is replaced on each run, so a team removed from the policy leaves no old report.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from kafka_policy_proxy.pipeline.jobs.scan_evaluation import AUDIT_ONLY, COMPLIANT, VIOLATING
from kafka_policy_proxy.pipeline.jobs.team_report import (
    RESULTS_SHOWN,
    TOPIC_COUNTS,
    ScanRun,
    TeamRows,
    policy_report,
    team_directory,
    teams_index,
)
from kafka_policy_proxy.pipeline.rendering.html_page import render
from kafka_policy_proxy.pipeline.rendering.team_page import team_page
from kafka_policy_proxy.pipeline.sources.hadoop_files import remove, write_text
from kafka_policy_proxy.policy.owners import UNOWNED
from kafka_policy_proxy.policy.rules import OwnerSpec

DECISION_COLUMNS = {"compliant": COMPLIANT, "violating": VIOLATING, "audit_only": AUDIT_ONLY}


@dataclass(frozen=True)
class ByOwner:
    """The scan's counts by owner, collected on the driver; the whole is their sum."""

    counts: list[dict[str, Any]]  # cluster_id, owner, topics, compliant, ..., violations
    rules: list[dict[str, Any]]  # owner, rule, mode, violations, topics
    first: list[dict[str, Any]]  # per owner its first `shown` violations, with `position`


def by_owner(evaluated: DataFrame, violations: DataFrame, *, shown: int) -> ByOwner:
    """Aggregate by owner on the executors: the driver gets rows bounded by the clusters,
    owners and rules, and `shown` violations per owner."""
    counts = evaluated.groupBy("cluster_id", "owner").agg(
        F.count("*").alias("topics"),
        *(
            F.sum((F.col("decision") == decision).cast("long")).alias(column)
            for column, decision in DECISION_COLUMNS.items()
        ),
        F.sum(F.size("violations")).alias("violations"),
    )
    # A topic has one owner: per-owner distinct topics add up to the whole's.
    rules = violations.groupBy("owner", "rule", "mode").agg(
        F.count("*").alias("violations"), F.countDistinct("cluster_id", "topic").alias("topics")
    )
    # The whole's first violations are among its owners' first: one window serves both.
    order = Window.partitionBy("owner").orderBy("cluster_id", "topic", "position")
    first = violations.withColumn("n", F.row_number().over(order)).where(F.col("n") <= shown)
    return ByOwner(
        [r.asDict() for r in counts.collect()],
        [r.asDict() for r in rules.collect()],
        [r.asDict() for r in first.drop("n").collect()],
    )


def team_rows(
    aggregates: ByOwner, *, teams: Sequence[str], rule_names: Sequence[str], skipped: Counter[str]
) -> dict[str, TeamRows]:
    """Each of `teams`, then `(unowned)`: its rows, from the aggregates by owner."""
    order = {rule: i for i, rule in enumerate(rule_names)}
    counts, rules, first = (
        _by_team(rows) for rows in (aggregates.counts, aggregates.rules, aggregates.first)
    )
    return {
        team: TeamRows(
            topics={key: sum(r[key] or 0 for r in counts[team]) for key in TOPIC_COUNTS},
            by_rule=sorted(
                ({k: r[k] for k in ("rule", "mode", "violations", "topics")} for r in rules[team]),
                key=lambda r: (order.get(r["rule"], len(order)), r["mode"]),
            ),
            shown=sorted(first[team], key=lambda r: (r["cluster_id"], r["topic"], r["position"]))[
                :RESULTS_SHOWN
            ],
            skipped=skipped[team],
        )
        for team in (*teams, UNOWNED)
    }


def _by_team(rows: list[dict[str, Any]]) -> defaultdict[str, list[dict[str, Any]]]:
    grouped: defaultdict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        grouped[row["owner"]].append(row)
    return grouped


def clear_team_reports(spark: SparkSession, out: str) -> None:
    """Remove an earlier run's reports per team, so that none outlives its team (or `teams`)."""
    base = out.rstrip("/")
    remove(spark, f"{base}/teams")
    remove(spark, f"{base}/teams.json")


def write_team_reports(
    spark: SparkSession,
    out: str,
    rows: Mapping[str, TeamRows],
    owners: Mapping[str, OwnerSpec],
    run: ScanRun,
) -> dict[str, dict[str, Any]]:
    """Write every team's report and `teams.json` under `out`; return each team's summary."""
    base = out.rstrip("/")
    reports = {team: policy_report(team, owners.get(team), r, run) for team, r in rows.items()}
    for team, report in reports.items():
        directory = f"{base}/{team_directory(team)}"
        write_text(spark, directory, "report.json", json.dumps(report, indent=2) + "\n")
        write_text(spark, directory, "report.html", render(team_page(report)))
    index = teams_index(reports, run)
    write_text(spark, base, "teams.json", json.dumps(index, indent=2) + "\n")
    return {team: report["summary"] for team, report in reports.items()}
