"""The scan's reports per team: counted in Spark, then one report per team from a bounded
collect (per team: its counts, a row per rule it breaks, its first `RESULTS_SHOWN` violations).

Outputs under `out/` (`pipeline.jobs.team_report` has the report's fields):

- `teams/<team>/report.json` and `report.html` for every team of the policy's `owners:`, in
  its order, then `teams/_unowned/` for the topics no team claims (`(unowned)`);
- `teams.json`: every team's summary and topic counts, and where its report is.

`teams/` is replaced on each run, so a team removed from the policy leaves no old report.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
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

_DECISIONS = {"compliant": COMPLIANT, "violating": VIOLATING, "audit_only": AUDIT_ONLY}


def team_rows(
    evaluated: DataFrame,
    violations: DataFrame,
    *,
    teams: Sequence[str],
    rule_names: Sequence[str],
    skipped: Counter[str],
) -> dict[str, TeamRows]:
    """Each of `teams` (then `(unowned)`): its rows, aggregated by owner on the executors."""
    counts = {
        r["owner"]: r.asDict()
        for r in evaluated.groupBy("owner")
        .agg(
            F.count("*").alias("topics"),
            *(
                F.sum((F.col("decision") == decision).cast("long")).alias(column)
                for column, decision in _DECISIONS.items()
            ),
        )
        .collect()
    }
    order = {rule: i for i, rule in enumerate(rule_names)}
    by_rule: dict[str, list[dict[str, Any]]] = {}
    for r in (
        violations.groupBy("owner", "rule", "mode")
        .agg(
            F.count("*").alias("violations"), F.countDistinct("cluster_id", "topic").alias("topics")
        )
        .collect()
    ):
        by_rule.setdefault(r["owner"], []).append(
            {k: r[k] for k in ("rule", "mode", "violations", "topics")}
        )
    first = Window.partitionBy("owner").orderBy("cluster_id", "topic", "position")
    shown: dict[str, list[dict[str, Any]]] = {}
    for r in (
        violations.withColumn("n", F.row_number().over(first))
        .where(F.col("n") <= RESULTS_SHOWN)
        .orderBy("owner", "n")
        .collect()
    ):
        shown.setdefault(r["owner"], []).append(
            {k: r[k] for k in ("cluster_id", "topic", "rule", "mode", "message")}
        )
    return {
        team: TeamRows(
            topics={key: counts.get(team, {}).get(key) or 0 for key in TOPIC_COUNTS},
            by_rule=sorted(
                by_rule.get(team, []),
                key=lambda r: (order.get(r["rule"], len(order)), r["mode"]),
            ),
            shown=shown.get(team, []),
            skipped=skipped[team],
        )
        for team in (*teams, UNOWNED)
    }


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
