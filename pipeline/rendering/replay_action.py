"""The replay's first screen, "What the candidate would break": the distinct requests,
principals, topics and client ids each way of flip, the applications (client ids) it would
break with an example message, and the sample of distinct flipped requests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kafka_policy_proxy.pipeline.rendering.html_page import (
    Cell,
    Note,
    Section,
    Table,
    filled_columns,
    message,
    utc,
)
from kafka_policy_proxy.pipeline.rendering.principals import principal_cell, unauthenticated

CLIENT_ROWS = 10


def act_section(facts: dict[str, Any], summary: dict[str, Any]) -> list[Section]:
    """The first screen's section of the replay (none from facts without its keys)."""
    requests = summary["requests"]
    parts: list[Table | Note] = []
    distinct = facts.get("distinct")  # absent from the facts of replays before the contract
    if distinct is not None:
        parts.append(
            Note(
                "Would deny "
                + _breakage(summary["allow_to_deny"], requests, distinct)
                + " Would allow "
                + _breakage(summary["deny_to_allow"], requests, facts["distinct_allowed"]),
                key="distinct",
            )
        )
    clients = facts.get("clients")
    if clients is not None:
        anonymous = [c for c in clients if unauthenticated(c["principal"])]
        if anonymous:
            parts.append(
                Note(
                    f"{sum(c['requests'] for c in anonymous):,} of the requests it would deny "
                    "come from unauthenticated clients: their owners cannot be told by "
                    "principal; use the client ids below.",
                    "warn",
                    key="unauthenticated",
                )
            )
        parts.append(_clients(clients))
    return [Section("What the candidate would break", parts, key="act")] if parts else []


def sample_table(rows: Sequence[dict[str, Any]]) -> Table:
    """Flipped requests (distinct ones, each with its count where the facts have it), without
    the columns no row fills."""
    columns: list[tuple[str, Any]] = [
        ("first time", lambda r: utc(r["time"])),
        ("flip", lambda r: r["flip"]),
        ("principal", lambda r: principal_cell(r["principal"])),
        ("client id", lambda r: r.get("client_id")),
        ("resource", resource),
        ("action", lambda r: r["action"]),
        ("requests", lambda r: r.get("requests")),
        ("recorded rules", lambda r: ", ".join(r["old_rules"] or ())),
        ("new violations", lambda r: message("; ".join(r["new_messages"] or ()))),
    ]
    names, cells = filled_columns(
        [name for name, _ in columns], [[cell(r) for _, cell in columns] for r in rows]
    )
    return Table(
        f"A sample of flipped requests (the first {len(rows)} by time; all in decisions/)",
        names,
        cells,
        "no flips",
        note="Distinct by principal, flip, resource and rules; without the columns no row fills.",
        key="sample",
    )


def resource(row: dict[str, Any]) -> str:
    """A flipped request's resource: a resource of no name (the cluster default, "") shows as
    its type alone."""
    return f"{row['resource_type']} {row['resource']}".rstrip()


def _breakage(flipped: int, requests: int, distinct: dict[str, int]) -> str:
    share = f"{100 * flipped / requests:.1f}%" if requests else "-"
    counts = (
        f"{_n(distinct['principals'], 'principal')}, {_n(distinct['topics'], 'topic')}, "
        f"{_n(distinct['client_ids'], 'client id')}"
    )
    return f"{_n(flipped, 'request')} ({share}; {distinct['requests']:,} distinct): {counts}."


def _n(count: int, thing: str) -> str:
    return f"{count:,} {thing}{'' if count == 1 else 's'}"


def _clients(rows: Sequence[dict[str, Any]]) -> Table:
    shown = rows[:CLIENT_ROWS]
    return Table(
        "Applications it would break (client ids, allow->deny)",
        ["client id", "principal", "requests", "topics", "rules", "example message"],
        [
            [
                r["client_id"] or "(none)",
                principal_cell(r["principal"]),
                r["requests"],
                _count(r["topics"]),
                _count(r["rules"]),
                message(r["example"]),
            ]
            for r in shown
        ],
        "no application would be denied anything it is allowed now",
        note=f"The {len(shown)} with most requests of {len(rows):,}."
        if len(rows) > len(shown)
        else "",
        key="clients",
    )


def _count(value: Any) -> Cell:
    # A count, or the names themselves where the facts list them.
    if isinstance(value, list | tuple):
        return ", ".join(map(str, value))
    return int(value)
