"""Hand-built facts for the report and replay pages, in the shapes of the contracts the jobs
fill (`report_facts`, `replay_facts`): ten days of hourly traffic whose last day stops at
14:23, a rule and a principal denied more in the last week, User:ANONYMOUS among the
principals, an exception about to expire and a budget near its limit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

FIRST = datetime(2026, 10, 1, 6, 12, 40, tzinfo=UTC)
LAST = datetime(2026, 10, 10, 14, 23, 7, tzinfo=UTC)
RULES = [f"rule-{i}" for i in range(1, 12)]
LONG_MESSAGE = (
    "[topic-naming] topic name 'payments.orders-v2-tmp' does not match "
    "^(payments|orders)\\.[a-z0-9-]+\\.v[0-9]+$ (naming convention: <domain>.<name>.v<N>); "
    "rename it or ask the platform team for an exception with a ticket"
)


def report_facts() -> dict[str, Any]:
    """The facts of a report over ten days whose first and last are partial."""
    hourly, rule_hours = [], []
    hour = FIRST.replace(minute=0, second=0)
    while hour <= LAST:
        later = hour >= LAST - timedelta(days=5)
        hourly += [
            {"hour": hour, "decision": "allowed", "events": 300},
            {"hour": hour, "decision": "denied", "events": 40 if later else 25},
            {"hour": hour, "decision": "audit-would-deny", "events": 5},
        ]
        rule_hours += [
            {"hour": hour, "rule": rule, "events": (30 if later and i == 0 else 10) // (i + 1)}
            for i, rule in enumerate(RULES[:9])
        ]
        hour += timedelta(hours=1)
    if LAST.hour:  # the last hour holds 23 minutes of the hour's traffic
        for row in hourly[-3:]:
            row["events"] = row["events"] * 23 // 60
    denied = sum(r["events"] for r in hourly if r["decision"] == "denied")
    events = sum(r["events"] for r in hourly)
    seen = {"first_seen": FIRST, "last_seen": LAST}
    principals = [
        {"rank": 1, "principal": "User:ANONYMOUS", "denials": 2000, "events": 3077, "topics": 40}
        | seen,
        *(
            {"rank": i, "principal": f"User:app-{i}", "denials": 900 // i, "events": 9000 // i}
            | {"topics": 30 // i}
            | seen
            for i in range(2, 30)
        ),
    ]
    return {
        "decisions": {
            d: sum(r["events"] for r in hourly if r["decision"] == d)
            for d in ("allowed", "denied", "audit-would-deny")
        },
        "actions": {"create_topic": {"allowed": events - denied, "denied": denied}},
        "first": FIRST,
        "last": LAST,
        "hourly": hourly,
        "principals": principals,
        "rules": [
            {"rank": i + 1, "rule": r, "denials": 1000 // (i + 1), "principals": 3, "topics": 9}
            | seen
            for i, r in enumerate(RULES)
        ],
        "audit_rules": [
            {"rule": "segment-size", "would_deny": 5, "denied_anyway": 1, "fired": 6}
            | {"principals": 2}
        ],
        "would_deny": [
            {"rule": "segment-size", "principal": "User:app-2", "would_deny": 5, "topics": 2} | seen
        ],
        "bad_lines": [
            {
                "source": f"file:///data/audit/2026/10/{day:02}/proxy-{n}.jsonl",
                "kind": "malformed",
                "problem": "not valid JSON" if n % 2 else "missing field principal",
                "lines": 100 - day - n,
                "first_line": 17 + n,
                "sample": '{"schema": 2, "time": "2026-10-01T00:00:00.000000Z", "principal":'
                + " 'x'" * 60,
            }
            for day in range(1, 11)
            for n in range(3)
        ],
        "lines": {
            "total": events + 1500,
            "malformed": 1500,
            "blank": 0,
            "unknown_version": 0,
        },
        "rule_hours": rule_hours,
        "window": {"since": None, "until": None},
        "periods": {
            "current": [LAST - timedelta(days=7), LAST],
            "previous": [FIRST, LAST - timedelta(days=7)],
        },
        "rising": [
            {"kind": "rule", "name": "rule-1", "denials": 4000, "previous": 1500}
            | {"change": 2500},
            {"kind": "principal", "name": "User:ANONYMOUS", "denials": 1500, "previous": 500}
            | {"change": 1000},
            {"kind": "principal", "name": "User:app-7", "denials": 30, "previous": 0}
            | {"change": 30},
        ],
        "topics": [
            {
                "rank": i,
                "topic": f"payments.orders-v2-tmp-{i}",
                "denials": 500 // i,
                "principals": 1 + i % 3,
                "rule": "topic-naming",
                "example": LONG_MESSAGE if i == 1 else f"[partitions] {i * 64} partitions > 48",
            }
            | seen
            for i in range(1, 31)
        ],
        "topics_total": 4655,
        "principal_rules": [
            {
                "principal": p,
                "rule": r,
                "denials": 100 // (j + 1) + (500 if p == "User:ANONYMOUS" else 0),
                "topics": 3,
                "example": f"[{r}] example message for {p}",
            }
            for p in ("User:ANONYMOUS", "User:app-2", "User:app-3", "User:app-4")
            for j, r in enumerate(RULES[:8])
        ],
        "exceptions": [
            {
                "exception": "payments-legacy-names",
                "rule": "topic-naming",
                "ticket": "PAY-123",
                "expires": "2026-10-15T00:00:00.000000Z",
                "waivers": 320,
                "principals": 2,
                "last_seen": LAST,
            },
            {
                "exception": "analytics-big-partitions",
                "rule": "partitions",
                "ticket": None,
                "expires": "2027-03-01T00:00:00.000000Z",
                "waivers": 12,
                "principals": 1,
                "last_seen": LAST - timedelta(days=2),
            },
        ],
        "budgets": [
            {"budget": "team-payments", "unit": "partitions", "limit": 1000, "usage": 930}
            | {"added": 12, "last_seen": LAST},
            {"budget": "team-analytics", "unit": "topics", "limit": 500, "usage": 120}
            | {"added": 1, "last_seen": LAST},
            {"budget": "sandbox", "unit": "topics", "limit": None, "usage": None}
            | {"added": None, "last_seen": LAST},
        ],
        "partial": {"first": True, "last": True},
    }


def replay_facts() -> tuple[dict[str, Any], dict[str, Any]]:
    """The facts and summary of a replay whose candidate breaks three applications."""
    time = datetime(2026, 10, 10, 9, 0, tzinfo=UTC)
    sample = [
        {
            "time": time + timedelta(seconds=i),
            "flip": "allow->deny" if i < 4 else "deny->allow",
            "principal": f"User:app-{i % 3}",
            "resource_type": "topic",
            "resource": f"orders.v{i}",
            "action": "create_topic",
            "old_rules": [] if i < 4 else ["partitions"],
            "new_messages": [f"[topic-naming] orders.v{i} breaks the convention"] if i < 4 else [],
            "requests": 900 - i,
        }
        for i in range(6)
    ]
    facts = {
        "by_rule": [
            {"flip": "allow->deny", "rule": "topic-naming", "requests": 8000, "principals": 3},
            {"flip": "deny->allow", "rule": "partitions", "requests": 10, "principals": 1},
        ],
        "to_deny": [
            {"flip": "allow->deny", "rule": "topic-naming", "requests": 8000, "principals": 3}
        ],
        "by_principal": [
            {"flip": "allow->deny", "principal": "User:ANONYMOUS", "requests": 5000},
            {"flip": "allow->deny", "principal": "User:app-1", "requests": 3000},
        ],
        "by_resource": [
            {"flip": "allow->deny", "resource_type": "topic", "resource": "orders.v1"}
            | {"requests": 4000},
        ],
        "sample": sample,
        "reasons": [],
        "bad_lines": [
            {"source": "file:///data/audit/a.jsonl", "kind": "blank", "problem": "blank line"}
            | {"lines": 3}
        ],
        "distinct": {"requests": 812, "principals": 3, "topics": 41, "client_ids": 5},
        "distinct_allowed": {"requests": 2, "principals": 1, "topics": 2, "client_ids": 1},
        "clients": [
            {
                "client_id": f"orders-service-{i}",
                "principal": "User:ANONYMOUS" if i == 0 else f"User:app-{i}",
                "requests": 4000 // (i + 1),
                "topics": 10 - i,
                "rules": ["topic-naming"],
                "example": LONG_MESSAGE,
            }
            for i in range(5)
        ],
        "cache": {"lookups": 98765, "hits": 90000},
    }
    summary = {
        "policy": "candidate.yaml",
        "snapshot": None,
        "requests": 99000,
        "allow_to_deny": 8000,
        "deny_to_allow": 10,
        "unchanged": 90990,
        "rules_changed": 4,
        "unknown": 0,
        "errors": 0,
        "lines": {"total": 99003, "malformed": 0, "blank": 3, "unknown_version": 0},
    }
    return facts, summary
