"""The report's first screen, "What to act on": is it getting better (the denials of this
period against the one before), which rules and principals are denied more, the most denied
topics with an example message, the unauthenticated clients, and what expires or runs out."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from kafka_policy_proxy.pipeline.rendering.governance import NEAR, SOON, expiring, near_limit
from kafka_policy_proxy.pipeline.rendering.html_page import Note, Section, Table, Text, message
from kafka_policy_proxy.pipeline.rendering.principals import principal_cell, unauthenticated

FIRST_SCREEN_ROWS = 5
_NO_PRINCIPAL = "the requests refused before authentication (no principal)"


def act_section(facts: dict[str, Any]) -> list[Section]:
    """The first screen's section of the report (none from old facts with nothing to say)."""
    parts: list[Table | Note] = []
    periods = facts.get("periods")  # absent from the facts of reports before the rollups
    if periods:
        parts.append(Note(period_change(facts["hourly"], periods), key="period-change"))
    parts += _unauthenticated(facts["principals"])
    soon = expiring(facts.get("exceptions", []), facts["last"])
    if soon:
        parts.append(
            Note(
                f"{len(soon)} exception(s) expire within {SOON.days} days of the last event: "
                f"{', '.join(soon)} (see Exceptions below).",
                "warn",
                key="exceptions-expiring",
            )
        )
    full = near_limit(facts.get("budgets", []))
    if full:
        parts.append(
            Note(
                f"{len(full)} budget(s) at {NEAR:.0%} of their limit or more: {', '.join(full)} "
                "(see Budgets below).",
                "warn",
                key="budgets-near-limit",
            )
        )
    if periods:
        parts.append(_rising(facts["rising"], periods))
    if "topics" in facts:
        parts.append(
            topics_table(
                facts["topics"][:FIRST_SCREEN_ROWS],
                facts["topics_total"],
                key="top-topics",
                note="Over the whole report; more in the list of denied topics below.",
            )
        )
    return [Section("What to act on", parts, key="act")] if parts else []


def period_change(hourly: Sequence[dict[str, Any]], periods: dict[str, Any]) -> str:
    """The denials and denial rate of the current period against the previous one: whether
    it is getting better (a lower denial rate, whatever the traffic)."""
    now = _counts(hourly, periods["current"], through=True)
    before = _counts(hourly, periods["previous"], through=False)
    answer = ""
    if now["events"] and before["events"]:
        rates = [c["denied"] / c["events"] for c in (now, before)]
        answer = "Yes: " if rates[0] < rates[1] else "No: " if rates[0] > rates[1] else ""
    return (
        f"Is it getting better? {answer}{now['denied']:,} denials in "
        f"{_span(periods['current'])} ({_rate(now)} of events) against {before['denied']:,} "
        f"in the period before, {_span(periods['previous'])} ({_rate(before)}): "
        f"{_change(now['denied'], before['denied'])}."
    )


def topics_table(rows: Sequence[dict[str, Any]], total: int, *, key: str, note: str) -> Table:
    """The denied `rows` of the `total` topics denied, each with the rule denying it most and
    one of its messages."""
    return Table(
        f"Most denied topics ({len(rows):,} of {total:,} denied)",
        ["rank", "topic", "denials", "principals", "rule denying most", "example message"],
        [
            [r["rank"], r["topic"], r["denials"], r["principals"], r["rule"], message(r["example"])]
            for r in rows
        ],
        "no topic was denied",
        note=note,
        key=key,
    )


def _rising(rows: Sequence[dict[str, Any]], periods: dict[str, Any]) -> Table:
    shown = rows[:FIRST_SCREEN_ROWS]
    more = f" The {len(shown)} largest rises of {len(rows):,}." if len(rows) > len(shown) else ""
    return Table(
        "Denied more than in the period before",
        ["what", "name", "before", "now", "change"],
        [
            [
                r["kind"],
                r["name"] if r["kind"] == "rule" else principal_cell(r["name"]),
                r["previous"],
                r["denials"],
                Text(_change(r["denials"], r["previous"]), "warn"),
            ]
            for r in shown
        ],
        "no rule or principal was denied more than in the period before",
        note=f"Now: {_span(periods['current'])}; before: {_span(periods['previous'])}.{more}",
        key="rising",
    )


def _unauthenticated(principals: Sequence[dict[str, Any]]) -> list[Note]:
    return [
        Note(
            f"Unauthenticated clients: {r['principal'] or _NO_PRINCIPAL} made {r['events']:,} "
            f"events, {r['denials']:,} of them denied ({100 * r['denials'] / r['events']:.1f}%), "
            f"on {r['topics']:,} topic(s). Its clients are not identified: require "
            "authentication on its listener, or find them by client id and address in the "
            "decisions.",
            "warn",
            key="unauthenticated",
        )
        for r in principals
        if unauthenticated(r["principal"]) and r["events"]
    ]


def _counts(
    hourly: Sequence[dict[str, Any]], span: Sequence[datetime], *, through: bool
) -> dict[str, int]:
    start, end = span
    counts = {"denied": 0, "events": 0}
    for row in hourly:
        # An hour counts in the period its start is in; the current one holds its end's hour.
        if start <= row["hour"] and (row["hour"] < end or (through and row["hour"] == end)):
            counts["events"] += row["events"]
            if row["decision"] == "denied":
                counts["denied"] += row["events"]
    return counts


def _rate(counts: dict[str, int]) -> str:
    if not counts["events"]:
        return "no events"
    return f"{100 * counts['denied'] / counts['events']:.1f}%"


def _change(now: int, before: int) -> str:
    if before == 0:
        return "new" if now else "none either"
    sign = "+" if now >= before else "-"
    return f"{sign}{abs(now - before):,} ({sign}{100 * abs(now - before) / before:.0f}%)"


def _span(span: Sequence[datetime]) -> str:
    start, end = span
    days = (end - start) / timedelta(days=1)
    length = f"{days:.0f} days" if days >= 1 else f"{days * 24:.0f} hours"
    return f"{length} to {end.strftime('%Y-%m-%d %H:%M')} UTC"
