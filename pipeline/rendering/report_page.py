"""`report.html`: the key figures with their rates, decisions over time, a trend per rule, the
top rules and principals, the decisions by action, the would-deny tables and the bad lines."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from kafka_policy_proxy.pipeline.rendering.charts import bar_chart, small_multiples, time_chart
from kafka_policy_proxy.pipeline.rendering.html_page import (
    Chart,
    Page,
    Table,
    percent,
    utc,
    with_share,
)
from kafka_policy_proxy.pipeline.rendering.input_lines import bad_lines_table, line_figures
from kafka_policy_proxy.pipeline.rendering.periods import Periods, bucket, per, periods_between

TOP = 10  # rows in the summary and the bar charts
TRENDS = 9  # rules with a trend chart of their own
TABLE_ROWS = 25  # rows in the HTML tables; the Parquet tables have them all


def report_page(facts: dict[str, Any], audit: str) -> Page:
    """The page of the report's facts (`report_facts`) over the input `audit`."""
    decisions = facts["decisions"]
    total = sum(decisions.values())
    lines = facts["lines"]
    bad = lines["total"] - total
    notes = [f"Input: {audit}."]
    if total == 0:
        notes.append("There are no decision events in the input: nothing to report.")
    if bad:
        notes.append(
            f"{bad:,} line(s) are not events (blank, malformed or of an unknown schema "
            "version) and are not counted as events: see the last table."
        )
    parts: list[Table | Chart] = []
    if total:
        periods = periods_between(facts["first"], facts["last"])
        parts.append(_time_chart(facts, periods))
        if facts["rule_hours"]:
            parts.append(_rule_trends(facts, periods))
    for name, ranked in (("rule", facts["rules"]), ("principal", facts["principals"])):
        if ranked:
            top = ranked[:TOP]
            labels = [r[name] for r in top]
            denials = [r["denials"] for r in top]
            parts.append(
                bar_chart(f"Denials by {name} (top {TOP})", labels, denials, "denied events")
            )
    parts += [
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
            _shown("Top denied principals", facts["principals"], "top_denied_principals"),
            [
                "rank",
                "principal",
                "denials",
                "events",
                "denial rate",
                "topics",
                "first denial",
                "last denial",
            ],
            [
                [
                    r["rank"],
                    r["principal"],
                    r["denials"],
                    r["events"],
                    percent(r["denials"], r["events"]),
                    r["topics"],
                    *_seen(r),
                ]
                for r in facts["principals"][:TABLE_ROWS]
            ],
            "no denials",
        ),
        Table(
            _shown("Top rules by denials (enforce mode)", facts["rules"], "top_denied_rules"),
            [
                "rank",
                "rule",
                "denials",
                "share of denied events",
                "principals",
                "topics",
                "first denial",
                "last denial",
            ],
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
        ),
        Table(
            "Audit-mode rules: what enforcing them would deny",
            [
                "rule",
                "would deny (now allowed)",
                "denied anyway",
                "fired",
                "principals that would be denied",
            ],
            [
                [r["rule"], r["would_deny"], r["denied_anyway"], r["fired"], r["principals"]]
                for r in facts["audit_rules"]
            ],
            "no audit-mode rule fired",
        ),
        Table(
            _shown("Audit-mode rules: who would be denied", facts["would_deny"], "would_deny"),
            ["rule", "principal", "would deny", "topics", "first fired", "last fired"],
            [
                [r["rule"], r["principal"], r["would_deny"], r["topics"], *_seen(r)]
                for r in facts["would_deny"][:TABLE_ROWS]
            ],
            "nobody",
        ),
        bad_lines_table(facts["bad_lines"]),
    ]
    return Page(
        "Audit report: who is being denied what",
        figures=[
            ("events", total),
            ("allowed", with_share(decisions["allowed"], total)),
            ("denied", with_share(decisions["denied"], total)),
            ("audit-would-deny", with_share(decisions["audit-would-deny"], total)),
            *line_figures(lines),
            ("first event", utc(facts["first"])),
            ("last event", utc(facts["last"])),
        ],
        notes=notes,
        parts=parts,
    )


def _shown(title: str, rows: Sequence[Any], table: str) -> str:
    if len(rows) <= TABLE_ROWS:
        return title
    return f"{title}: the first {TABLE_ROWS} of {len(rows):,} (all in {table}/)"


def _seen(row: dict[str, Any]) -> list[str | None]:
    return [utc(row["first_seen"]), utc(row["last_seen"])]


def _time_chart(facts: dict[str, Any], periods: Periods) -> Chart:
    # The decisions in the record's order: the keys of facts["decisions"].
    decisions = list(facts["decisions"])
    counts: dict[tuple[datetime, str], int] = defaultdict(int)
    for row in facts["hourly"]:
        counts[bucket(row["hour"], periods.step), row["decision"]] += row["events"]
    series: dict[str, Sequence[float]] = {
        d: [float(counts[t, d]) for t in periods.starts] for d in decisions
    }
    totals = [sum(series[d][i] for d in decisions) for i in range(len(periods.starts))]
    rate = [d / t if t else 0.0 for d, t in zip(series["denied"], totals, strict=True)]
    step = per(periods)
    return time_chart(
        f"Decisions per {step} (UTC)", periods, series, f"events per {step}", ("denial rate", rate)
    )


def _rule_trends(facts: dict[str, Any], periods: Periods) -> Chart:
    counts: dict[tuple[datetime, str], int] = defaultdict(int)
    for row in facts["rule_hours"]:
        counts[bucket(row["hour"], periods.step), row["rule"]] += row["events"]
    rules = [r["rule"] for r in facts["rules"][:TRENDS]]
    series: dict[str, Sequence[float]] = {
        rule: [float(counts[t, rule]) for t in periods.starts] for rule in rules
    }
    step = per(periods)
    return small_multiples(f"Denials per {step}, by rule", periods, series, f"denials per {step}")
