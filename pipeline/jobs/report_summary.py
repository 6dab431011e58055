"""The report's facts (what its page and summary show, gathered on the driver) and its summary.

`summary.json` (what `run_report` returns): the events per decision and per recorded action
(every action of the record's schema, zeros included), the input's `lines` as every job
counts them, the time range, the top principals and rules and the audit-mode rules.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from kafka_policy_proxy.pipeline.jobs.report_aggregation import Rows
from kafka_policy_proxy.pipeline.rendering.report_page import TOP
from kafka_policy_proxy.pipeline.sources.audit_events import ACTIONS, DECISIONS, line_summary


def report_facts(
    totals: Rows, hourly: Rows, by_action: Rows, tables: dict[str, Rows]
) -> dict[str, Any]:
    """What the page and the summary show: the collected totals and the ranked tables."""
    by_decision = dict.fromkeys(DECISIONS, 0)
    for row in totals:
        by_decision[row["decision"]] = row["events"]
    actions = {action: dict.fromkeys(DECISIONS, 0) for action in ACTIONS}
    for row in by_action:
        actions[row["action"]][row["decision"]] = row["events"]
    per_rule: dict[str, dict[str, Any]] = {}
    for row in tables["would_deny"]:
        entry = per_rule.setdefault(
            row["rule"],
            {"rule": row["rule"], "would_deny": 0, "denied_anyway": 0, "fired": 0, "principals": 0},
        )
        for key in ("would_deny", "denied_anyway", "fired"):
            entry[key] += row[key]
        entry["principals"] += row["would_deny"] > 0
    return {
        "decisions": by_decision,
        "actions": actions,
        "first": min((r["first_seen"] for r in totals), default=None),
        "last": max((r["last_seen"] for r in totals), default=None),
        "hourly": hourly,
        "principals": tables["top_denied_principals"],
        "rules": tables["top_denied_rules"],
        "audit_rules": sorted(
            per_rule.values(), key=lambda r: (-r["would_deny"], -r["fired"], r["rule"])
        ),
        "would_deny": [r for r in tables["would_deny"] if r["would_deny"] > 0],
        "bad_lines": tables["bad_lines"],
        # Good lines: a summary record is one line of many decisions.
        "lines": line_summary(sum(r["records"] for r in totals), tables["bad_lines"]),
    }


def report_summary(facts: dict[str, Any], outputs: dict[str, str]) -> dict[str, Any]:
    """The report's `summary.json`, from its facts."""

    def jsonable(rows: Rows) -> Rows:
        return [
            {k: _iso(v) if isinstance(v, datetime) else v for k, v in row.items()}
            for row in rows[:TOP]
        ]

    return {
        "events": sum(facts["decisions"].values()),
        "decisions": dict(facts["decisions"]),
        "actions": {action: sum(counts.values()) for action, counts in facts["actions"].items()},
        "lines": facts["lines"],
        "time_range": {"first": _iso(facts["first"]), "last": _iso(facts["last"])},
        "top_principals": jsonable(facts["principals"]),
        "top_rules": jsonable(facts["rules"]),
        "audit_rules": jsonable(facts["audit_rules"]),
        "outputs": outputs,
    }


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
