"""The report's `summary.json` (what `run_report` returns), from its facts
(`pipeline.jobs.report_facts`).

The events per decision and per recorded action (every action of the record's schema, zeros
included), the input's `lines` as every job counts them, the time range and the window asked
for, the top principals and rules, the audit-mode rules, what rose against the previous
period, the most denied topics (and how many were denied), the exceptions that waived
violations, the budgets' latest usage, and the warnings.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kafka_policy_proxy.pipeline.jobs.report_rollups import Rows
from kafka_policy_proxy.pipeline.rendering.report_page import TOP


def report_summary(
    facts: dict[str, Any], outputs: dict[str, str], warnings: list[str]
) -> dict[str, Any]:
    """The report's `summary.json`, from its facts."""

    def jsonable(rows: Rows, top: int | None = TOP) -> Rows:
        return [
            {k: _iso(v) if isinstance(v, datetime) else v for k, v in row.items()}
            for row in rows[:top]
        ]

    periods = facts["periods"]
    return {
        "events": sum(facts["decisions"].values()),
        "decisions": dict(facts["decisions"]),
        "actions": {action: sum(counts.values()) for action, counts in facts["actions"].items()},
        "lines": facts["lines"],
        "time_range": {"first": _iso(facts["first"]), "last": _iso(facts["last"])},
        "top_principals": jsonable(facts["principals"]),
        "top_rules": jsonable(facts["rules"]),
        "audit_rules": jsonable(facts["audit_rules"]),
        "window": {k: _iso(v) for k, v in facts["window"].items()},
        "periods": None
        if periods is None
        else {name: [_iso(t) for t in span] for name, span in periods.items()},
        "rising": jsonable(facts["rising"]),
        "top_topics": jsonable(facts["topics"]),
        "topics_denied": facts["topics_total"],
        "exceptions": jsonable(facts["exceptions"], None),
        "budgets": jsonable(facts["budgets"], None),
        "outputs": outputs,
        "warnings": warnings,
    }


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
