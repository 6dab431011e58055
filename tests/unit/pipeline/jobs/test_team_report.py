"""A team's report from the scan's rows by owner, without Spark: counts, order and truncation."""

from __future__ import annotations

from collections import Counter

from kafka_policy_proxy.pipeline.jobs.scan_teams import ByOwner, team_rows
from kafka_policy_proxy.pipeline.jobs.team_report import (
    RESULTS_SHOWN,
    ScanRun,
    policy_report,
    teams_index,
)
from kafka_policy_proxy.pipeline.rendering.html_page import render
from kafka_policy_proxy.pipeline.rendering.team_page import team_page
from kafka_policy_proxy.policy.rules import OwnerSpec

RUN = ScanRun("policy.yaml", ["prod.jsonl"], "User:ANONYMOUS", "2026-11-29T02:00:00Z")
MANY = RESULTS_SHOWN + 50


def _violation(owner: str, topic: str, position: int, rule: str, mode: str) -> dict[str, object]:
    return {
        "owner": owner,
        "cluster_id": "prod",
        "topic": topic,
        "position": position,
        "rule": rule,
        "mode": mode,
        "message": f"[{rule}] {topic}",
    }


AGGREGATES = ByOwner(
    counts=[
        {"cluster_id": "prod", "owner": "big", "topics": MANY, "compliant": 0,
         "violating": MANY, "audit_only": 0, "violations": MANY + 1},
        {"cluster_id": "prod", "owner": "(unowned)", "topics": 3, "compliant": 3,
         "violating": 0, "audit_only": 0, "violations": 0},
    ],
    rules=[
        {"owner": "big", "rule": "size", "mode": "audit", "violations": 1, "topics": 1},
        {"owner": "big", "rule": "naming", "mode": "enforce", "violations": MANY, "topics": MANY},
    ],
    first=[
        *(_violation("big", f"t{i:03}", 0, "naming", "enforce") for i in range(MANY)),
        _violation("big", "t000", 1, "size", "audit"),
    ],
)  # fmt: skip


def test_a_team_report_counts_everything_and_lists_its_first_results() -> None:
    rows = team_rows(
        AGGREGATES, teams=["big", "idle"], rule_names=["naming", "size"], skipped=Counter()
    )
    assert list(rows) == ["big", "idle", "(unowned)"]
    report = policy_report("big", OwnerSpec(topic_prefixes=["t"]), rows["big"], RUN)
    assert report["summary"] == {"pass": 0, "fail": MANY, "warn": 1, "error": 0, "skip": 0}
    assert [r["rule"] for r in report["rules"]] == ["naming", "size"]
    assert report["results_total"] == MANY + 1
    assert len(report["results"]) == RESULTS_SHOWN
    # By cluster, topic and the rule's place in the topic's violations.
    assert [(r["resource"]["name"], r["result"]) for r in report["results"][:3]] == [
        ("t000", "fail"), ("t000", "warn"), ("t001", "fail")
    ]  # fmt: skip
    assert report["results"][1]["severity"] == "low"
    assert f"Results: the first {RESULTS_SHOWN} of {MANY + 1:,}" in render(team_page(report))
    # A team with no topics still gets its (empty) report.
    idle = policy_report("idle", OwnerSpec(topics=["idle\\..+"]), rows["idle"], RUN)
    assert idle["summary"] == {"pass": 0, "fail": 0, "warn": 0, "error": 0, "skip": 0}
    assert "no topic of this team breaks the policy" in render(team_page(idle))
    unowned = policy_report("(unowned)", None, rows["(unowned)"], RUN)
    index = teams_index({"big": report, "idle": idle, "(unowned)": unowned}, RUN)
    assert [(t["team"], t["report"]) for t in index["teams"]] == [
        ("big", "teams/big/report.json"),
        ("idle", "teams/idle/report.json"),
        ("(unowned)", "teams/_unowned/report.json"),
    ]
