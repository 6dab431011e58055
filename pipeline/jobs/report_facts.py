"""The report's facts, computed on the driver from the collected rollups
(`pipeline.jobs.report_rollups`): totals, the hourly series, the ranked tables, what rose,
the most denied topics, the principal x rule table, exceptions and budgets.

Ranks: rank 1 has the most denials, ties by name. Distinct counts (topics, principals) come
from the per-day topic rollup; counts, first and last times from the per-hour one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from kafka_policy_proxy.pipeline.jobs.report_rollups import Rows, Window
from kafka_policy_proxy.pipeline.rendering.periods import periods_between
from kafka_policy_proxy.pipeline.rendering.report_page import TRENDS
from kafka_policy_proxy.pipeline.sources.audit_events import ACTIONS, DECISIONS, line_summary
from kafka_policy_proxy.pipeline.sources.lake_rollups import (
    BUDGETS,
    HOURS,
    LINES,
    TOPICS,
    WAIVERS,
)

DENIED = "denied"
WOULD_DENY = "audit-would-deny"
TOPICS_SHOWN = 100  # most denied topics in the facts; `topics_total` counts them all
_HOUR = timedelta(hours=1)
_WEEK = timedelta(days=7)


def _denial(row: dict[str, Any]) -> bool:
    """A rule's row of a denied event, the rule enforced (it denied)."""
    return bool(row["decision"] == DENIED and row["rule_mode"] == "enforce")


def report_facts(rollup: dict[str, Rows], window: Window) -> tuple[dict[str, Any], dict[str, Rows]]:
    """What the page and the summary show, and the small tables (ranked or sorted), from the
    collected rollups."""
    hours, topics = rollup[HOURS], rollup[TOPICS]
    own = [r for r in hours if r["rule"] is None]
    ruled = [r for r in hours if r["rule"] is not None]
    decisions = dict.fromkeys(DECISIONS, 0)
    actions = {action: dict.fromkeys(DECISIONS, 0) for action in ACTIONS}
    hourly: dict[tuple[datetime, str], int] = defaultdict(int)
    for row in own:
        decisions[row["decision"]] += row["events"]
        actions[row["action"]][row["decision"]] += row["events"]
        hourly[row["hour"], row["decision"]] += row["events"]
    first = min((r["first_seen"] for r in own), default=None)
    last = max((r["last_seen"] for r in own), default=None)
    principals = _principals(own, topics)
    rules = _rules(ruled, topics)
    would_deny = _would_deny(ruled, topics)
    bad_lines = sorted(rollup[LINES], key=lambda r: (-r["lines"], r["source"], r["problem"]))
    trending = {r["rule"] for r in rules[:TRENDS]}
    rule_hours = _sums((r for r in ruled if _denial(r) and r["rule"] in trending), ("hour", "rule"))
    periods = _periods(first, last)
    drawn = periods_between(first, last) if first is not None and last is not None else None
    denied_topics = _topics(topics)
    facts = {
        "window": {"since": window.since, "until": window.until},
        "decisions": decisions,
        "actions": actions,
        "first": first,
        "last": last,
        "hourly": [{"hour": h, "decision": d, "events": n} for (h, d), n in hourly.items()],
        "principals": principals,
        "rules": rules,
        "audit_rules": _audit_rules(would_deny),
        "would_deny": [r for r in would_deny if r["would_deny"] > 0],
        "bad_lines": bad_lines,
        # Good lines: a summary record is one line of many decisions.
        "lines": line_summary(sum(r["records"] for r in own), bad_lines),
        "rule_hours": rule_hours,
        "periods": periods,
        "rising": _rising(own, ruled, periods),
        "topics": denied_topics[:TOPICS_SHOWN],
        "topics_total": len(denied_topics),
        "principal_rules": _principal_rules(topics),
        "exceptions": _exceptions(rollup[WAIVERS]),
        "budgets": _budgets(rollup[BUDGETS]),
        "partial": {
            "first": bool(drawn and drawn.first_partial),
            "last": bool(drawn and drawn.last_partial),
        },
    }
    tables = {
        "top_denied_principals": principals,
        "top_denied_rules": rules,
        "would_deny": would_deny,
        "bad_lines": bad_lines,
    }
    return facts, tables


def _sums(rows: Iterable[dict[str, Any]], keys: tuple[str, ...]) -> Rows:
    """The rows' events summed per `keys`."""
    sums: dict[tuple[Any, ...], int] = defaultdict(int)
    for row in rows:
        sums[tuple(row[k] for k in keys)] += row["events"]
    return [dict(zip(keys, key, strict=True)) | {"events": n} for key, n in sums.items()]


def _ranked(rows: Iterable[dict[str, Any]], name: str) -> Rows:
    ordered = sorted(rows, key=lambda r: (-r["denials"], r[name]))
    return [{"rank": i, **row} for i, row in enumerate(ordered, 1)]


class _Tally:
    """Per key: sums, distinct sets, first and last times."""

    def __init__(self) -> None:
        self.rows: dict[Any, dict[str, Any]] = {}

    def entry(self, key: Any, make: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """The key's entry, made on first use."""
        found = self.rows.get(key)
        if found is None:
            found = self.rows[key] = make()
        return found


def _seen(entry: dict[str, Any], row: dict[str, Any]) -> None:
    first, last = entry["first_seen"], entry["last_seen"]
    entry["first_seen"] = row["first_seen"] if first is None else min(first, row["first_seen"])
    entry["last_seen"] = row["last_seen"] if last is None else max(last, row["last_seen"])


def _distinct(
    topics: Rows, keep: Callable[[dict[str, Any]], bool], key: Callable[[dict[str, Any]], Any]
) -> dict[Any, set[str]]:
    """The distinct topics of the topic rows kept, per key."""
    found: dict[Any, set[str]] = defaultdict(set)
    for row in topics:
        if row["topic"] is not None and keep(row):
            found[key(row)].add(row["topic"])
    return found


def _principals(own: Rows, topics: Rows) -> Rows:
    tally = _Tally()
    for row in own:
        entry = tally.entry(
            row["principal"],
            lambda: {"denials": 0, "events": 0, "first_seen": None, "last_seen": None},
        )
        entry["events"] += row["events"]
        if row["decision"] == DENIED:
            entry["denials"] += row["events"]
            _seen(entry, row)
    denied = _distinct(
        topics, lambda r: r["rule"] is None and r["decision"] == DENIED, lambda r: r["principal"]
    )
    return _ranked(
        (
            {
                "principal": name,
                "denials": e["denials"],
                "events": e["events"],
                "topics": len(denied[name]),
                "first_seen": e["first_seen"],
                "last_seen": e["last_seen"],
            }
            for name, e in tally.rows.items()
            if e["denials"] > 0
        ),
        "principal",
    )


def _rules(ruled: Rows, topics: Rows) -> Rows:
    tally = _Tally()
    for row in ruled:
        if _denial(row):
            entry = tally.entry(
                row["rule"],
                lambda: {"denials": 0, "principals": set(), "first_seen": None, "last_seen": None},
            )
            entry["denials"] += row["events"]
            entry["principals"].add(row["principal"])
            _seen(entry, row)
    denied = _distinct(topics, _denial, lambda r: r["rule"])
    return _ranked(
        (
            {
                "rule": name,
                "denials": e["denials"],
                "principals": len(e["principals"]),
                "topics": len(denied[name]),
                "first_seen": e["first_seen"],
                "last_seen": e["last_seen"],
            }
            for name, e in tally.rows.items()
        ),
        "rule",
    )


def _would_deny(ruled: Rows, topics: Rows) -> Rows:
    tally = _Tally()
    for row in ruled:
        if row["rule_mode"] == "audit":
            entry = tally.entry(
                (row["rule"], row["principal"]),
                lambda: {
                    "would_deny": 0,
                    "denied_anyway": 0,
                    "fired": 0,
                    "first_seen": None,
                    "last_seen": None,
                },
            )
            entry["fired"] += row["events"]
            if row["decision"] == WOULD_DENY:
                entry["would_deny"] += row["events"]
            elif row["decision"] == DENIED:
                entry["denied_anyway"] += row["events"]
            _seen(entry, row)
    fired = _distinct(
        topics, lambda r: r["rule_mode"] == "audit", lambda r: (r["rule"], r["principal"])
    )
    rows = [
        {
            "rule": rule,
            "principal": principal,
            "would_deny": e["would_deny"],
            "denied_anyway": e["denied_anyway"],
            "fired": e["fired"],
            "topics": len(fired[rule, principal]),
            "first_seen": e["first_seen"],
            "last_seen": e["last_seen"],
        }
        for (rule, principal), e in tally.rows.items()
    ]
    return sorted(rows, key=lambda r: (-r["would_deny"], -r["fired"], r["rule"], r["principal"]))


def _audit_rules(would_deny: Rows) -> Rows:
    per_rule: dict[str, dict[str, Any]] = {}
    for row in would_deny:
        entry = per_rule.setdefault(
            row["rule"],
            {"rule": row["rule"], "would_deny": 0, "denied_anyway": 0, "fired": 0, "principals": 0},
        )
        for key in ("would_deny", "denied_anyway", "fired"):
            entry[key] += row[key]
        entry["principals"] += row["would_deny"] > 0
    return sorted(per_rule.values(), key=lambda r: (-r["would_deny"], -r["fired"], r["rule"]))


def _periods(first: datetime | None, last: datetime | None) -> dict[str, list[datetime]] | None:
    """The last 7 days (in whole hours, to the end of the last event's) against the 7 before;
    if the data spans less than 14 days, its later half against its earlier half."""
    if first is None or last is None:
        return None
    start = first.replace(minute=0, second=0, microsecond=0)
    end = last.replace(minute=0, second=0, microsecond=0) + _HOUR
    half = _WEEK if end - start >= 2 * _WEEK else ((end - start) // _HOUR // 2) * _HOUR
    return {"current": [end - half, end], "previous": [end - 2 * half, end - half]}


def _rising(own: Rows, ruled: Rows, periods: dict[str, list[datetime]] | None) -> Rows:
    if periods is None or periods["current"][0] == periods["current"][1]:
        return []
    (previous_start, middle), (_, end) = periods["previous"], periods["current"]
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for kind, rows, name in (
        ("principal", (r for r in own if r["decision"] == DENIED), "principal"),
        ("rule", (r for r in ruled if _denial(r)), "rule"),
    ):
        for row in rows:
            if previous_start <= row["hour"] < end:
                counts[kind, row[name]][row["hour"] >= middle] += row["events"]
    rising = [
        {"kind": kind, "name": name, "denials": now, "previous": before, "change": now - before}
        for (kind, name), (before, now) in counts.items()
        if now > before
    ]
    return sorted(rising, key=lambda r: (-r["change"], r["kind"], r["name"]))


def _topics(topics: Rows) -> Rows:
    tally = _Tally()
    by_rule: dict[tuple[str, str], list[Any]] = {}
    for row in topics:
        if row["topic"] is None or row["decision"] != DENIED:
            continue
        if row["rule"] is None:
            entry = tally.entry(
                row["topic"],
                lambda: {"denials": 0, "principals": set(), "first_seen": None, "last_seen": None},
            )
            entry["denials"] += row["events"]
            entry["principals"].add(row["principal"])
            _seen(entry, row)
        elif row["rule_mode"] == "enforce":
            found = by_rule.setdefault((row["topic"], row["rule"]), [0, None])
            found[0] += row["events"]
            if row["example"] is not None and (found[1] is None or row["example"] < found[1]):
                found[1] = row["example"]
    top: dict[str, tuple[int, str, str | None]] = {}
    for (topic, rule), (denials, example) in by_rule.items():
        best = top.get(topic)
        if best is None or (-denials, rule) < (-best[0], best[1]):
            top[topic] = (denials, rule, example)
    return _ranked(
        (
            {
                "topic": topic,
                "denials": e["denials"],
                "principals": len(e["principals"]),
                "rule": top[topic][1] if topic in top else None,
                "example": top[topic][2] if topic in top else None,
                "first_seen": e["first_seen"],
                "last_seen": e["last_seen"],
            }
            for topic, e in tally.rows.items()
        ),
        "topic",
    )


def _principal_rules(topics: Rows) -> Rows:
    tally = _Tally()
    for row in topics:
        if row["rule"] is not None and _denial(row):
            entry = tally.entry(
                (row["principal"], row["rule"]),
                lambda: {"denials": 0, "topics": set(), "example": None},
            )
            entry["denials"] += row["events"]
            if row["topic"] is not None:
                entry["topics"].add(row["topic"])
            example = row["example"]
            if example is not None and (entry["example"] is None or example < entry["example"]):
                entry["example"] = example
    rows = [
        {
            "principal": principal,
            "rule": rule,
            "denials": e["denials"],
            "topics": len(e["topics"]),
            "example": e["example"],
        }
        for (principal, rule), e in tally.rows.items()
    ]
    return sorted(rows, key=lambda r: (-r["denials"], r["principal"], r["rule"]))


def _exceptions(waivers: Rows) -> Rows:
    tally = _Tally()
    for row in waivers:
        key = (row["exception"], row["rule"], row["ticket"], row["expires"])
        entry = tally.entry(key, lambda: {"waivers": 0, "principals": set(), "last_seen": None})
        entry["waivers"] += row["events"]
        entry["principals"].add(row["principal"])
        last = entry["last_seen"]
        entry["last_seen"] = row["last_seen"] if last is None else max(last, row["last_seen"])
    rows = [
        {
            "exception": exception,
            "rule": rule,
            "ticket": ticket,
            "expires": expires,
            "waivers": e["waivers"],
            "principals": len(e["principals"]),
            "last_seen": e["last_seen"],
        }
        for (exception, rule, ticket, expires), e in tally.rows.items()
    ]
    # Expiring soonest first.
    return sorted(rows, key=lambda r: (r["expires"], r["exception"], r["rule"]))


def _budgets(budgets: Rows) -> Rows:
    rows = [
        {k: row[k] for k in ("budget", "unit", "limit", "usage", "added", "last_seen")}
        for row in budgets
    ]

    # Nearest to its limit first; an unlimited usage (null) last.
    def fill(row: dict[str, Any]) -> float:
        return -1.0 if row["usage"] is None else row["usage"] / row["limit"]

    return sorted(rows, key=lambda r: (-fill(r), r["budget"]))
