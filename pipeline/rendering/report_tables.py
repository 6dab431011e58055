"""The report's ranked tables: principals, rules, the principal x rule table (what one sends
to a team), the denied topics, the decisions by action and the audit-mode rules."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from kafka_policy_proxy.pipeline.rendering.html_page import Table, message, percent, utc
from kafka_policy_proxy.pipeline.rendering.principals import principal_cell
from kafka_policy_proxy.pipeline.rendering.report_action import topics_table

TABLE_ROWS = 25  # rows in the HTML tables; the Parquet tables have them all


def ranked_tables(facts: dict[str, Any]) -> list[Table]:
    """The tables below the charts, in the page's order."""
    decisions = facts["decisions"]
    tables = []
    if "principal_rules" in facts:  # absent from the facts of reports before the rollups
        tables.append(_principal_rules(facts["principal_rules"]))
    tables += [
        Table(
            "Top denied principals",
            ["rank", "principal", "denials", "events", "denial rate", "topics", "first", "last"],
            [
                [
                    r["rank"],
                    principal_cell(r["principal"]),
                    r["denials"],
                    r["events"],
                    percent(r["denials"], r["events"]),
                    r["topics"],
                    *_seen(r),
                ]
                for r in facts["principals"][:TABLE_ROWS]
            ],
            "no denials",
            note=_shown(facts["principals"], "top_denied_principals"),
        ),
        Table(
            "Top rules by denials (enforce mode)",
            ["rank", "rule", "denials", "share of denied", "principals", "topics", "first", "last"],
            [
                [
                    r["rank"],
                    r["rule"],
                    r["denials"],
                    percent(r["denials"], decisions["denied"]),
                    r["principals"],
                    r["topics"],
                    *_seen(r),
                ]
                for r in facts["rules"][:TABLE_ROWS]
            ],
            "no rule denied anything",
            note=_shown(facts["rules"], "top_denied_rules"),
        ),
    ]
    if "topics" in facts:
        tables.append(
            topics_table(
                facts["topics"][:TABLE_ROWS],
                facts["topics_total"],
                key="topics",
                note="Each with the rule denying it most and one of its violation messages.",
            )
        )
    tables += [
        Table(
            "Decisions by action",
            ["action", "events", *decisions],
            [
                [action, sum(counts.values()), *counts.values()]
                for action, counts in facts["actions"].items()
                if any(counts.values())
            ],
            "no decisions",
        ),
        Table(
            "Audit-mode rules: what enforcing them would deny",
            ["rule", "would deny (now allowed)", "denied anyway", "fired", "principals"],
            [
                [r["rule"], r["would_deny"], r["denied_anyway"], r["fired"], r["principals"]]
                for r in facts["audit_rules"]
            ],
            "no audit-mode rule fired",
            note="Principals: those that would be denied.",
        ),
        Table(
            "Audit-mode rules: who would be denied",
            ["rule", "principal", "would deny", "topics", "first fired", "last fired"],
            [
                [r["rule"], principal_cell(r["principal"]), r["would_deny"], r["topics"], *_seen(r)]
                for r in facts["would_deny"][:TABLE_ROWS]
            ],
            "nobody",
            note=_shown(facts["would_deny"], "would_deny"),
        ),
    ]
    return tables


def _principal_rules(rows: Sequence[dict[str, Any]]) -> Table:
    # Grouped by principal, the most denied first: each group is what one sends its team.
    totals: dict[str, int] = defaultdict(int)
    for r in rows:
        totals[r["principal"]] += r["denials"]
    ordered = sorted(
        rows, key=lambda r: (-totals[r["principal"]], r["principal"], -r["denials"], r["rule"])
    )
    return Table(
        "Denials by principal and rule",
        ["principal", "rule", "denials", "topics", "example message"],
        [
            [
                principal_cell(r["principal"]),
                r["rule"],
                r["denials"],
                r["topics"],
                message(r["example"]),
            ]
            for r in ordered[:TABLE_ROWS]
        ],
        "no denials",
        note="Each principal's rows are what to send its team. "
        + (f"The first {TABLE_ROWS} of {len(rows):,}." if len(rows) > TABLE_ROWS else ""),
        key="principal-rules",
    )


def _shown(rows: Sequence[Any], table: str) -> str:
    if len(rows) <= TABLE_ROWS:
        return ""
    return f"The first {TABLE_ROWS} of {len(rows):,} (all in {table}/)."


def _seen(row: dict[str, Any]) -> list[str | None]:
    return [utc(row["first_seen"]), utc(row["last_seen"])]
