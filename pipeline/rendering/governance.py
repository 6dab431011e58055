"""The report's sections on governance: the exceptions in use, soonest to expire first, and
the budgets, fullest first. Expiry is counted from the report's last event, so that a report
says the same whatever day it is read."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from kafka_policy_proxy.pipeline.rendering.html_page import Cell, Table, Text, utc

SOON = timedelta(days=14)
NEAR = 0.8  # a budget this full is near its limit
_NEVER = datetime.max.replace(tzinfo=UTC)  # where an expiry that cannot be read sorts


def expiring(exceptions: Sequence[dict[str, Any]], last: datetime | None) -> list[str]:
    """The exceptions that expire within SOON of `last` (or have expired)."""
    if last is None:
        return []
    return [
        e["exception"]
        for e in exceptions
        if (when := _instant(e["expires"])) is not None and when - _aware(last) <= SOON
    ]


def near_limit(budgets: Sequence[dict[str, Any]]) -> list[str]:
    """The budgets whose latest usage is NEAR their limit or beyond."""
    return [b["budget"] for b in budgets if (_share(b) or 0) >= NEAR]


def exceptions_table(exceptions: Sequence[dict[str, Any]], last: datetime | None) -> Table:
    """Each exception in use: its rule, ticket, expiry (and how soon), waivers and principals."""
    ordered = sorted(exceptions, key=lambda e: (_instant(e["expires"]) or _NEVER, e["exception"]))
    return Table(
        "Exceptions in use, soonest to expire first",
        ["exception", "rule", "ticket", "expires", "expires in", "waivers", "principals", "last"],
        [
            [
                e["exception"],
                e["rule"],
                e["ticket"],
                utc(_instant(e["expires"])) or e["expires"],  # as recorded if unreadable
                _expires_in(e["expires"], last),
                e["waivers"],
                e["principals"],
                utc(e["last_seen"]),
            ]
            for e in ordered
        ],
        "no exception waived anything",
        note="Waivers: the violations each exception waived; days counted from the last event.",
        key="exceptions",
    )


def budgets_table(budgets: Sequence[dict[str, Any]]) -> Table:
    """Each budget's latest usage against its limit, fullest first."""
    ordered = sorted(budgets, key=lambda b: (-(_share(b) or -1), b["budget"]))
    return Table(
        "Budgets, fullest first",
        ["budget", "unit", "usage", "limit", "used", "last request added", "last"],
        [
            [
                b["budget"],
                b["unit"],
                b["usage"],
                "unlimited" if b["limit"] is None else b["limit"],
                _used(b),
                b["added"],
                utc(b["last_seen"]),
            ]
            for b in ordered
        ],
        "no budget was charged",
        note=f"The latest usage each budget recorded; at {NEAR:.0%} or more it is near its limit.",
        key="budgets",
    )


def _share(budget: dict[str, Any]) -> float | None:
    if not budget["limit"] or budget["usage"] is None:
        return None
    return float(budget["usage"]) / float(budget["limit"])


def _used(budget: dict[str, Any]) -> Cell:
    share = _share(budget)
    if share is None:
        return None
    return Text(f"{share:.0%}", "warn" if share >= NEAR else "")


def _expires_in(expires: str, last: datetime | None) -> Cell:
    when = _instant(expires)
    if when is None or last is None:
        return None
    days = (when - _aware(last)) / timedelta(days=1)
    if days < 0:
        return Text(f"expired {-days:.0f} days before", "warn")
    return Text(f"{days:.0f} days", "warn" if days <= SOON.days else "")


def _instant(text: str | None) -> datetime | None:
    try:
        return _aware(datetime.fromisoformat(text)) if text else None
    except ValueError:
        return None  # shown as recorded


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
