"""`report.html`: the key figures, then what to act on (`report_action`), decisions over time
and a trend per rule (partial periods drawn as such), the top rules and principals, the
ranked tables (`report_tables`), exceptions and budgets when recorded, and the bad lines."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from kafka_policy_proxy.pipeline.rendering.charts import bar_chart, small_multiples, time_chart
from kafka_policy_proxy.pipeline.rendering.governance import budgets_table, exceptions_table
from kafka_policy_proxy.pipeline.rendering.html_page import Chart, Page, Part, utc, with_share
from kafka_policy_proxy.pipeline.rendering.input_lines import bad_lines_table, line_figures
from kafka_policy_proxy.pipeline.rendering.periods import Periods, bucket, per, periods_between
from kafka_policy_proxy.pipeline.rendering.principals import principal_name
from kafka_policy_proxy.pipeline.rendering.report_action import act_section
from kafka_policy_proxy.pipeline.rendering.report_tables import ranked_tables

TOP = 10  # rows in the summary and the bar charts
TRENDS = 9  # rules with a trend chart of their own


def report_page(facts: dict[str, Any], audit: str) -> Page:
    """The page of the report's facts (`report_facts`) over the input `audit`."""
    decisions = facts["decisions"]
    total = sum(decisions.values())
    lines = facts["lines"]
    bad = lines["total"] - total
    notes = [f"Input: {audit}.", *_window(facts.get("window"))]
    if total == 0:
        notes.append("There are no decision events in the input: nothing to report.")
    if bad:
        notes.append(
            f"{bad:,} line(s) are not events (blank, malformed or of an unknown schema "
            "version) and are not counted as events: see the last table."
        )
    parts: list[Part] = []
    if total:
        parts += act_section(facts)
        periods = _periods(facts)
        parts.append(_time_chart(facts, periods))
        if facts["rule_hours"]:
            parts.append(_rule_trends(facts, periods))
    for name, ranked in (("rule", facts["rules"]), ("principal", facts["principals"])):
        if ranked:
            top = ranked[:TOP]
            labels = [principal_name(r[name]) if name == "principal" else r[name] for r in top]
            denials = [r["denials"] for r in top]
            parts.append(
                bar_chart(f"Denials by {name} (top {TOP})", labels, denials, "denied events")
            )
    parts += ranked_tables(facts)
    if facts.get("exceptions"):  # absent before the rollups, empty without exceptions
        parts.append(exceptions_table(facts["exceptions"], facts["last"]))
    if facts.get("budgets"):
        parts.append(budgets_table(facts["budgets"]))
    parts.append(bad_lines_table(facts["bad_lines"]))
    return Page(
        "Audit report: who is being denied what",
        figures=[
            ("events", total),
            ("allowed", with_share(decisions["allowed"], total)),
            ("denied", with_share(decisions["denied"], total)),
            ("audit-would-deny", with_share(decisions["audit-would-deny"], total)),
            *_topics_figure(facts),
            *line_figures(lines),
            ("first event", utc(facts["first"])),
            ("last event", utc(facts["last"])),
        ],
        notes=notes,
        parts=parts,
    )


def _topics_figure(facts: dict[str, Any]) -> list[tuple[str, int]]:
    return [("denied topics", facts["topics_total"])] if "topics_total" in facts else []


def _window(window: dict[str, datetime | None] | None) -> list[str]:
    if not window or (window["since"] is None and window["until"] is None):
        return []
    since, until = utc(window["since"]) or "the first event", utc(window["until"]) or "the last"
    return [f"Window asked: from {since} to {until}."]


def _periods(facts: dict[str, Any]) -> Periods:
    periods = periods_between(facts["first"], facts["last"])
    # The job may know better: a window or a stream cut inside a period the data fills.
    partial = facts.get("partial") or {}
    return replace(
        periods,
        first_partial=periods.first_partial or bool(partial.get("first")),
        last_partial=periods.last_partial or bool(partial.get("last")),
    )


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
    chart = time_chart(
        f"Decisions per {step} (UTC)", periods, series, f"events per {step}", ("denial rate", rate)
    )
    return replace(chart, key="decisions-over-time")


def _rule_trends(facts: dict[str, Any], periods: Periods) -> Chart:
    counts: dict[tuple[datetime, str], int] = defaultdict(int)
    for row in facts["rule_hours"]:
        counts[bucket(row["hour"], periods.step), row["rule"]] += row["events"]
    rules = [r["rule"] for r in facts["rules"][:TRENDS]]
    series: dict[str, Sequence[float]] = {
        rule: [float(counts[t, rule]) for t in periods.starts] for rule in rules
    }
    step = per(periods)
    chart = small_multiples(f"Denials per {step}, by rule", periods, series, f"denials per {step}")
    return replace(chart, key="rule-trends")
