"""The shape of an audit data set, counted from its files: what docs/benchmarks.md states.

How many records of each kind, how many distinct principals, topics, client ids and
connections, and how often the request texts repeat: with the client's address (as the lake
stores them) and without it (what a judgement depends on).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def kind_of(record: dict[str, Any]) -> str:
    """The record's kind of request: auto-create, validate-only create, create, alter, ..."""
    if record["api"] == "Metadata":
        return "auto-create"
    if record["action"] == "create":
        return "validate-only create" if record["validate_only"] else "create"
    if record["action"] == "alter":
        return f"alter {record['request'].get('alter_kind')}"
    return str(record["action"])


def traffic_stats(lines: Iterable[str]) -> dict[str, Any]:
    """Counts over JSON lines of decision records."""
    kinds: Counter[str] = Counter()
    decisions: Counter[str] = Counter()
    principals: set[str] = set()
    topics: set[str] = set()
    client_ids: set[str] = set()
    connections: set[tuple[str, int]] = set()
    texts: set[int] = set()
    judged: set[int] = set()
    by_kind: dict[str, set[int]] = {}
    created: Counter[str] = Counter()
    hours: set[str] = set()
    waived = budgets = records = 0
    for line in lines:
        record = json.loads(line)
        records += 1
        kind = kind_of(record)
        kinds[kind] += 1
        decisions[record["decision"]] += 1
        principals.add(record["principal"])
        topics.add(record["resource"])
        client_ids.add(record["client_id"])
        connections.add((record["proxy_id"], record["conn"]))
        hours.add(record["time"][:13])
        request = record["request"]
        texts.add(hash(json.dumps(request, separators=(",", ":"))))
        request["principal"].pop("address", None)
        text = hash(json.dumps(request, separators=(",", ":")))
        judged.add(text)
        by_kind.setdefault(kind, set()).add(text)
        waived += "waived" in record
        budgets += "budgets" in record
        if kind == "create" and record["decision"] in ("allowed", "audit-would-deny"):
            created[record["resource"]] += 1
    return {
        "records": records,
        "kinds": dict(kinds.most_common()),
        "decisions": dict(decisions.most_common()),
        "principals": len(principals),
        "topics": len(topics),
        "client_ids": len(client_ids),
        "connections": len(connections),
        "distinct_request_texts": len(texts),
        "distinct_requests_without_address": len(judged),
        # Records per distinct request (address aside), by kind: how heavily each repeats.
        "repeats": {k: round(kinds[k] / len(seen), 1) for k, seen in by_kind.items()},
        "with_waived": waived,
        "with_budgets": budgets,
        "topics_created": len(created),
        "created_twice": sum(1 for n in created.values() if n > 1),
        "days": len({h[:10] for h in hours}),
        "hours": len(hours),
        "first_hour": min(hours, default=None),
        "last_hour": max(hours, default=None),
    }


def file_stats(directory: Path) -> dict[str, Any]:
    """`traffic_stats` over every audit-*.jsonl file of a directory, with their size."""
    files = sorted(directory.glob("audit-*.jsonl"))

    def lines() -> Iterable[str]:
        for path in files:
            with path.open(encoding="utf-8") as handle:
                yield from handle

    return traffic_stats(lines()) | {"bytes": sum(f.stat().st_size for f in files)}
