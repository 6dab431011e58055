"""A team's `report.html`: its report.json as a page (counts, its rules, its first results)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka_policy_proxy.pipeline.rendering.html_page import Page, Table


def team_page(report: Mapping[str, Any]) -> Page:
    """The page of one team's policy report (`pipeline.jobs.team_report.policy_report`)."""
    summary, topics, owns = report["summary"], report["topics"], report["owns"]
    if owns is None:
        claim = "Topics no team of the policy's `owners:` claims."
    else:
        claimed = [f"names starting with `{p}`" for p in owns["topic_prefixes"]]
        claimed += [f"names matching `{p}`" for p in owns["topics"]]
        claim = f"Topics with {', '.join(claimed)}, unless a team listed before claims them."
    notes = [
        claim,
        f"Policy {report['policy']}; snapshots: {', '.join(report['snapshots'])}; scanned "
        f"{report['timestamp']}, every topic as if {report['principal']} created it now.",
        "fail: a violation of an enforced rule; warn: of an audit-mode rule; pass: a compliant "
        "topic; skip: an internal topic, not evaluated.",
    ]
    results = report["results"]
    title = "Results"
    if report["results_total"] > len(results):
        title = (
            f"Results: the first {len(results):,} of {report['results_total']:,} "
            "(all in the scan's violations/, by owner)"
        )
    parts = [
        Table(
            "Rules",
            ("rule", "mode", "violations", "topics"),
            [(r["rule"], r["mode"], r["violations"], r["topics"]) for r in report["rules"]],
            empty="no topic of this team breaks the policy",
        ),
        Table(
            title,
            ("cluster", "topic", "rule", "result", "severity", "message"),
            [
                (
                    r["resource"]["cluster_id"],
                    r["resource"]["name"],
                    r["rule"],
                    r["result"],
                    r["severity"],
                    r["message"],
                )
                for r in results
            ],
            empty="no violations",
        ),
    ]
    figures = [
        ("Topics", topics["topics"]),
        *((key.capitalize(), summary[key]) for key in ("pass", "fail", "warn", "error", "skip")),
    ]
    return Page(f"Policy report: {report['team']}", figures, notes, parts)
