"""One team's policy report from the scan, in the manner of Kyverno's PolicyReport; no Spark.

A report has a `summary` of result counts (`pass`, `fail`, `warn`, `error`, `skip`) and
`results`, one per topic and violated rule:

- `fail`: a violation of a rule in enforce mode (the proxy would deny the topic's create);
  severity `high`;
- `warn`: a violation of a rule in audit mode (only recorded); severity `low`;
- `pass`: a compliant topic, counted but not listed (a team's report stays short);
- `skip`: an internal topic, not evaluated, counted;
- `error`: always 0: a topic that cannot be judged fails the whole scan.

`results` holds the first `RESULTS_SHOWN` violations (by cluster, topic and the policy's rule
order); the counts are exact, and every violation is in the scan's `violations` table with its
`owner`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kafka_policy_proxy.policy.owners import UNOWNED
from kafka_policy_proxy.policy.rules import OwnerSpec

RESULTS_SHOWN = 200
RESULT = {"enforce": "fail", "audit": "warn"}
SEVERITY = {"fail": "high", "warn": "low"}
COUNTS = ("pass", "fail", "warn", "error", "skip")
TOPIC_COUNTS = ("topics", "compliant", "violating", "audit_only")


@dataclass(frozen=True)
class ScanRun:
    """What every team's report says about the scan it came from."""

    policy: str
    snapshots: Sequence[str]
    principal: str
    timestamp: str  # the scan's start, RFC 3339 UTC


@dataclass(frozen=True)
class TeamRows:
    """One team's rows, collected on the driver: bounded by the rules and RESULTS_SHOWN."""

    topics: Mapping[str, int]  # TOPIC_COUNTS
    by_rule: Sequence[Mapping[str, Any]]  # rule, mode, violations, topics; in policy order
    shown: Sequence[Mapping[str, Any]]  # cluster_id, topic, rule, mode, message
    skipped: int  # internal topics the team owns, not evaluated


def team_directory(team: str) -> str:
    """Where a team's report goes under the scan's output: `teams/<team>`."""
    # Team names cannot start with `_`: the unowned topics' directory cannot clash.
    return "teams/_unowned" if team == UNOWNED else f"teams/{team}"


def policy_report(
    team: str, owns: OwnerSpec | None, rows: TeamRows, run: ScanRun
) -> dict[str, Any]:
    """The team's report as `report.json` holds it."""
    fail = sum(r["violations"] for r in rows.by_rule if RESULT[r["mode"]] == "fail")
    warn = sum(r["violations"] for r in rows.by_rule if RESULT[r["mode"]] == "warn")
    results = []
    for v in rows.shown:
        result = RESULT[v["mode"]]
        results.append(
            {
                "policy": run.policy,
                "rule": v["rule"],
                "resource": {"kind": "Topic", "cluster_id": v["cluster_id"], "name": v["topic"]},
                "result": result,
                "severity": SEVERITY[result],
                "message": v["message"],
                "timestamp": run.timestamp,
            }
        )
    return {
        "kind": "PolicyReport",
        "source": "kafka-policy-proxy pipeline scan",
        "team": team,
        "owns": None if owns is None else owns.model_dump(),
        "policy": run.policy,
        "snapshots": list(run.snapshots),
        "principal": run.principal,
        "timestamp": run.timestamp,
        "summary": {
            "pass": rows.topics["compliant"],
            "fail": fail,
            "warn": warn,
            "error": 0,
            "skip": rows.skipped,
        },
        "topics": {key: rows.topics[key] for key in TOPIC_COUNTS},
        "rules": [dict(r) for r in rows.by_rule],
        "results_total": fail + warn,
        "results": results,
    }


def teams_index(reports: Mapping[str, Mapping[str, Any]], run: ScanRun) -> dict[str, Any]:
    """`teams.json`: every team's counts and where its report is, in the policy's team order."""
    return {
        "policy": run.policy,
        "timestamp": run.timestamp,
        "unowned": UNOWNED,
        "teams": [
            {
                "team": team,
                "report": f"{team_directory(team)}/report.json",
                "html": f"{team_directory(team)}/report.html",
                "summary": report["summary"],
                "topics": report["topics"],
            }
            for team, report in reports.items()
        ],
    }
