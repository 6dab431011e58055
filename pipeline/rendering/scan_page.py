"""`scan.html`: the notes on how existing topics are judged, violations by rule, the clusters,
the teams (when the scan reports per team) and the first violations (all of them are in
`violations/`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka_policy_proxy.pipeline.rendering.charts import bar_chart
from kafka_policy_proxy.pipeline.rendering.html_page import Chart, Page, Table

VIOLATIONS_SHOWN = 200

Rows = list[dict[str, Any]]


def scan_page(summary: Mapping[str, Any], *, clusters: Rows, by_rule: Rows, shown: Rows) -> Page:
    """The page of the scan's summary, its clusters, violations by rule and the first ones."""
    principal = summary["principal"]
    notes = [
        f"Policy {summary['policy']}; snapshots: {', '.join(summary['snapshots'])}.",
        f"Every topic is evaluated as if {principal} created it now, with its current "
        "partition count, replication factor and configs, in the cluster made of the other "
        "topics of its snapshot. Existing topics have no creator: rules that select "
        f"principals apply as they would to {principal}.",
        "Replica placement counts as the broker's, so rules against explicit assignments flag "
        "no existing topic. Configs set on the topic (DYNAMIC_TOPIC_CONFIG) count as set in "
        "the request; the others as the broker defaults the topic gets.",
        "A cluster over a cluster-wide limit has every topic flagged by that rule: none of "
        "them could be created today.",
        f"Internal topics are not evaluated: {summary['skipped_internal']:,} skipped.",
        *(f"Warning: {w}." for w in summary["warnings"]),
    ]
    parts: list[Table | Chart] = []
    if by_rule:
        largest = sorted(by_rule, key=lambda r: -r["violations"])
        parts.append(
            bar_chart(
                "Violations by rule",
                [r["rule"] for r in largest],
                [r["violations"] for r in largest],
                "violations",
            )
        )
    parts.append(
        Table(
            "Rules",
            ("rule", "mode", "violations", "topics"),
            [(r["rule"], r["mode"], r["violations"], r["topics"]) for r in by_rule],
            empty="no topic breaks the policy",
        )
    )
    parts.append(
        Table(
            "Clusters",
            (
                "cluster",
                "brokers",
                "topics",
                "compliant",
                "violating",
                "audit-only",
                "internal skipped",
                "violations",
            ),
            [
                (
                    r["cluster_id"],
                    r["brokers"],
                    r["topics"],
                    r["compliant"],
                    r["violating"],
                    r["audit_only"],
                    r["skipped_internal"],
                    r["violations"],
                )
                for r in clusters
            ],
        )
    )
    if "teams" in summary:
        parts.append(
            Table(
                "Teams (each one's report: teams.json)",
                ("team", "pass", "fail", "warn", "error", "skip"),
                [
                    (team, c["pass"], c["fail"], c["warn"], c["error"], c["skip"])
                    for team, c in summary["teams"].items()
                ],
            )
        )
    total = summary["violations"]
    title = "Violations"
    if total > len(shown):
        title = f"Violations: the first {len(shown):,} of {total:,} (all in violations/)"
    parts.append(
        Table(
            title,
            ("cluster", "topic", "rule", "mode", "message"),
            [(r["cluster_id"], r["topic"], r["rule"], r["mode"], r["message"]) for r in shown],
            empty="no violations",
        )
    )
    figures = [
        ("Clusters", summary["clusters"]),
        ("Topics scanned", summary["topics"]),
        ("Violating", summary["violating"]),
        ("Audit-only", summary["audit_only"]),
        ("Compliant", summary["compliant"]),
        ("Internal skipped", summary["skipped_internal"]),
        ("Violations", total),
    ]
    return Page("Policy scan of existing topics", figures, notes, parts)
