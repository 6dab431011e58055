"""`replay.html`: the share of requests that would flip, then what the candidate would break
(`replay_action`: distinct principals, topics and client ids, and the applications), the most
affected topics (and other resources), principals and rules, a sample of distinct flipped
requests, the unknown and failed replays and the bad lines."""

from __future__ import annotations

from typing import Any

from kafka_policy_proxy.pipeline.rendering.charts import bar_chart
from kafka_policy_proxy.pipeline.rendering.html_page import (
    Cell,
    Note,
    Page,
    Part,
    Table,
    percent,
    with_share,
)
from kafka_policy_proxy.pipeline.rendering.input_lines import bad_lines_table, line_figures
from kafka_policy_proxy.pipeline.rendering.principals import principal_cell
from kafka_policy_proxy.pipeline.rendering.replay_action import (
    act_section,
    resource,
    sample_table,
)

SAMPLE_ROWS = 10  # the flipped requests shown; all of them are in `decisions`
TABLE_ROWS = 10
CHART_RULES = 20


def replay_page(facts: dict[str, Any], summary: dict[str, Any], audit: str) -> Page:
    """The page of the replay's facts (`replay_facts`) and summary over the input `audit`."""
    requests = summary["requests"]
    flips = summary["allow_to_deny"] + summary["deny_to_allow"]
    parts: list[Part] = [
        *act_section(facts, summary),
        *_how_to_read(facts, summary),
        Table(
            f"Most affected topics and resources (the top {TABLE_ROWS})",
            ["flip", "resource", "requests", "share of requests"],
            [
                [r["flip"], resource(r), r["requests"], percent(r["requests"], requests)]
                for r in facts["by_resource"]
            ],
            "no flips",
        ),
        Table(
            f"Most affected principals (the top {TABLE_ROWS})",
            ["flip", "principal", "requests", "share of requests"],
            [
                [
                    r["flip"],
                    principal_cell(r["principal"]),
                    r["requests"],
                    percent(r["requests"], requests),
                ]
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
        sample_table(facts["sample"][:SAMPLE_ROWS]),
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
            *_breaks(facts),
            ("deny->allow", with_share(summary["deny_to_allow"], requests)),
            ("requests", requests),
            ("unchanged", summary["unchanged"]),
            ("of which other rules", summary["rules_changed"]),
            ("unknown", with_share(summary["unknown"], requests)),
            ("errors", summary["errors"]),
            *line_figures(summary["lines"]),
        ],
        notes=[f"Candidate policy: {summary['policy']}. Input: {audit}."],
        parts=parts,
    )


def _breaks(facts: dict[str, Any]) -> list[tuple[str, Cell]]:
    # Who and what the allow->deny flips are, each counted once: not repeated requests.
    distinct = facts.get("distinct")  # absent from the facts of replays before the contract
    if distinct is None:
        return []
    return [
        ("principals denied", distinct["principals"]),
        ("topics denied", distinct["topics"]),
        ("client ids denied", distinct["client_ids"]),
    ]


def _how_to_read(facts: dict[str, Any], summary: dict[str, Any]) -> list[Note]:
    snapshot = summary["snapshot"]
    notes = [
        "A flip compares whether the request would go through: audit-would-deny counts as "
        "allowed. allow->deny flips are attributed to the candidate's enforce-mode rules, "
        "deny->allow flips to the recorded enforce-mode rules that no longer deny."
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
    cache = facts.get("cache")  # absent from replays before the judgement cache
    if cache and cache["lookups"]:
        notes.append(
            f"Judgement cache: {cache['hits']:,} of {cache['lookups']:,} lookups were "
            f"answered from it ({percent(cache['hits'], cache['lookups'])}): identical "
            "requests judged once."
        )
    return [Note(text) for text in notes]
