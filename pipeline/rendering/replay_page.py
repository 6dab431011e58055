"""`replay.html`: the share of requests that would flip, then the most affected topics (and
other resources), principals and rules, a sample of flipped requests, the unknown and failed
replays and the bad lines."""

from __future__ import annotations

from typing import Any

from kafka_policy_proxy.pipeline.rendering.charts import bar_chart
from kafka_policy_proxy.pipeline.rendering.html_page import (
    Chart,
    Page,
    Table,
    percent,
    utc,
    with_share,
)
from kafka_policy_proxy.pipeline.rendering.input_lines import bad_lines_table, line_figures

SAMPLE_ROWS = 10  # the flipped requests shown; all of them are in `decisions`
TABLE_ROWS = 10
CHART_RULES = 20


def replay_page(facts: dict[str, Any], summary: dict[str, Any], audit: str) -> Page:
    """The page of the replay's facts (`replay_facts`) and summary over the input `audit`."""
    snapshot = summary["snapshot"]
    notes = [
        f"Candidate policy: {summary['policy']}. Input: {audit}.",
        "A flip compares whether the request would go through: audit-would-deny counts as "
        "allowed. allow->deny flips are attributed to the candidate's enforce-mode rules, "
        "deny->allow flips to the recorded enforce-mode rules that no longer deny.",
    ]
    if snapshot is None:
        notes.append(
            "No snapshot: requests for which the candidate needs cluster facts that audit "
            "events do not record (topic names, broker count, total partitions, a topic "
            "state or broker defaults the recorded policy did not fetch, or every topic's "
            "state for a new topic-config default) are unknown. Pass --snapshot to decide them."
        )
    else:
        notes.append(
            f"Cluster facts the events do not record come from the snapshot of cluster "
            f"{snapshot['cluster_id']} ({', '.join(snapshot['paths'])}); each event's own "
            "topic state wins over the snapshot's."
        )
    requests = summary["requests"]
    flips = summary["allow_to_deny"] + summary["deny_to_allow"]
    parts: list[Table | Chart] = [
        Table(
            f"Most affected topics and resources (the top {TABLE_ROWS})",
            ["flip", "resource", "requests", "share of requests"],
            [
                [r["flip"], _resource(r), r["requests"], percent(r["requests"], requests)]
                for r in facts["by_resource"]
            ],
            "no flips",
        ),
        Table(
            f"Most affected principals (the top {TABLE_ROWS})",
            ["flip", "principal", "requests", "share of requests"],
            [
                [r["flip"], r["principal"], r["requests"], percent(r["requests"], requests)]
                for r in facts["by_principal"]
            ],
            "no flips",
        ),
        Table(
            f"Most affected rules (the top {TABLE_ROWS}; all in flips/)",
            ["flip", "rule", "requests", "principals"],
            [
                [r["flip"], r["rule"], r["requests"], r["principals"]]
                for r in facts["by_rule"][:TABLE_ROWS]
            ],
            "no flips",
        ),
    ]
    if facts["to_deny"]:
        top = facts["to_deny"][:CHART_RULES]
        parts.append(
            bar_chart(
                "allow->deny flips by rule",
                [r["rule"] or "(none)" for r in top],
                [r["requests"] for r in top],
                "requests that would be denied",
            )
        )
    parts += [
        Table(
            f"A sample of flipped requests (the first {SAMPLE_ROWS} by time; all in decisions/)",
            ["time", "flip", "principal", "resource", "action", "recorded rules", "new violations"],
            [
                [
                    utc(r["time"]),
                    r["flip"],
                    r["principal"],
                    _resource(r),
                    r["action"],
                    ", ".join(r["old_rules"]),
                    "; ".join(r["new_messages"]),
                ]
                for r in facts["sample"]
            ],
            "no flips",
        ),
        Table(
            f"Unknown and failed replays by reason (the top {TABLE_ROWS})",
            ["new decision", "reason", "requests"],
            [[r["flip"], r["reason"], r["requests"]] for r in facts["reasons"]],
            "every request was replayed",
        ),
        bad_lines_table(facts["bad_lines"]),
    ]
    return Page(
        "Policy replay: what the candidate policy would change",
        figures=[
            ("would flip", percent(flips, requests)),
            ("allow->deny", with_share(summary["allow_to_deny"], requests)),
            ("deny->allow", with_share(summary["deny_to_allow"], requests)),
            ("requests", requests),
            ("unchanged", summary["unchanged"]),
            ("of which other rules", summary["rules_changed"]),
            ("unknown", with_share(summary["unknown"], requests)),
            ("errors", summary["errors"]),
            *line_figures(summary["lines"]),
        ],
        notes=notes,
        parts=parts,
    )


def _resource(row: dict[str, Any]) -> str:
    # A resource of no name (the cluster default, "") shows as its type alone.
    return f"{row['resource_type']} {row['resource']}".rstrip()
