"""A seeded corpus of described topic requests, with the policy and cluster they are judged in.

The mix covers what the entry points could disagree on: topics missing from the cluster,
audit-mode rules, principal and client-id selectors, Kafka Streams internal topics (KIP-698),
in-use facts (an orders-in-use rule on orders.v1),
broker defaults (-1 partitions, configs left to the default, reset configs), every action,
and deletes by name, by known id and by unknown id.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import yaml

from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.policy.offline.cluster_spec import ClusterSpec
from kafka_policy_proxy.policy.offline.request_spec import RequestSpec
from kafka_policy_proxy.policy.offline.scenario import parse_cluster, parse_request

EXAMPLE_POLICY = Path(__file__).resolve().parents[2] / "examples" / "policy.yaml"
EXTRA_RULES: list[dict[str, Any]] = [
    {
        "name": "ops-cli-only-deletes",
        "match": {"actions": ["delete"], "client_ids": ["ops-*"], "topic_prefix": "orders."},
        "mode": "audit",
        "deny": True,
    },
    {
        "name": "no-compaction-for-alice",
        "match": {"principals": ["User:alice"]},
        "configs": {"cleanup.policy": {"values": ["delete"]}},
    },
    {"name": "topic-limit", "cluster": {"max_topics": 9}},
    {
        "name": "orders-in-use",
        "match": {"topic_prefix": "orders.", "actions": ["delete", "delete_records"]},
        "in_use": {"written_within": "15m", "consumed_within": "15m"},
    },
]
# With the example policy's: a per-principal budget the corpus's principals fill, and a
# retention budget (partitions x retention.bytes, -1 unlimited).
EXTRA_BUDGETS: list[dict[str, Any]] = [
    {
        "name": "per-user-partitions",
        "principals": ["User:alice", "User:bob"],
        "topic_prefix": "{user}.",
        "max_partitions": 8,
    },
    {"name": "sandbox-bytes", "topic_prefix": "sandbox.", "max_retention_bytes": "4GiB"},
]
# Judged at entry_points.AGREEMENT_NOW (2026-11-22T04:47:01.123456Z): one exception in force
# until a microsecond after it, one that expired at that very instant (so waives nothing).
EXTRA_EXCEPTIONS: list[dict[str, Any]] = [
    {
        "name": "alice-payments-migration",
        "match": {"principals": ["User:alice"], "topic_prefix": "payments"},
        "waive": ["no-compaction-for-alice", "segment-size"],
        "reason": "the ledger moves to compacted topics",
        "ticket": "PAY-7",
        "expires": "2026-12-01T00:00:00Z",
    },
    {
        "name": "bob-replication",
        "match": {"principals": ["User:bob"], "actions": ["create", "alter"]},
        "waive": [
            "replication",
            "topic-limit",
            "durability",
            "topic-naming",
            "partition-count",
            "per-user-partitions",
        ],
        "reason": "a test cluster of one broker",
        "expires": "2026-11-22T04:47:01.123457Z",
    },
    {
        "name": "expired-for-everyone",
        "match": {},
        "waive": ["replication", "segment-size", "protected-topics"],
        "reason": "expired at the instant every entry point judges",
        "expires": "2026-11-22T04:47:01.123456Z",
    },
]
DEFAULTS = {
    "num.partitions": "3",
    "default.replication.factor": "3",
    "retention.ms": "604800000",
    "cleanup.policy": "delete",
    "min.insync.replicas": "2",
    "segment.bytes": "1073741824",
    "retention.bytes": "1073741824",
}
# What the in-use guard (the orders-in-use rule) reads of orders.v1: a live group,
# and a stopped one whose commit lies within the window.
IN_USE = {
    "read_at": "2026-11-22T04:47:00Z",
    "latest": {"0": "2026-11-22T04:00:00Z"},
    "ends": {"0": 120},
    "groups": [
        {"group": "billing", "state": "Stable", "members": True, "committed": {"0": 120}},
        {"group": "audit", "committed": {"0": 60}, "consumed_at": {"0": "2026-11-22T04:40:00Z"}},
    ],
}
EXISTING: list[dict[str, Any]] = [
    {"name": "orders.v1", "partitions": 12, "in_use": IN_USE},
    {"name": "orders_v2", "partitions": 3},
    {"name": "payments.ledger", "partitions": 6, "configs": {"cleanup.policy": "compact"}},
    {"name": "sandbox.tmp", "partitions": 3, "configs": {"retention.ms": "3600000"}},
    {"name": "Legacy_Topic", "partitions": 1, "replication_factor": 1},
    {"name": "clicks.raw", "partitions": 64, "configs": {"segment.bytes": "1048576"}},
    {
        "name": "payments-ledger-balances-changelog",
        "partitions": 12,
        "configs": {"cleanup.policy": "compact"},
    },
    {"name": "fraud-detector-agg-repartition", "partitions": 6},
    {"name": "alice.scratch", "partitions": 4},
    {"name": "sandbox.logs", "partitions": 1, "configs": {"retention.bytes": "-1"}},
    {"name": "__consumer_offsets", "partitions": 50, "internal": True},
    {"name": "__canary", "partitions": 1},
]
MISSING = [
    "orders.v9",
    "orders_v1",
    "shipping.events",
    "Bad_Name",
    "payments.refunds",
    "payments-ledger-totals-changelog",
    "fraud-detector-join-repartition",
    "fraud-detector-x-subscription-response-topic",
    "__transaction_state",
    "alice.events",
    "bob.events",
    "sandbox.new",
]
PRINCIPALS = [
    "User:alice",
    "User:bob",
    "User:platform-admin",
    "User:streams-payments",
    "User:streams-fraud",
    "User:ANONYMOUS",
]
CLIENT_IDS = ["ops-cli", "app-1", ""]
UNKNOWN_ID = "00000000-0000-4000-8000-00000000dead"
OPERATIONS = {  # operation -> weight
    "create_topics": 30,
    "auto_create": 5,
    "alter_configs": 10,
    "incremental_alter_configs": 20,
    "create_partitions": 10,
    "alter_partition_reassignments": 5,
    "delete_topics": 12,
    "delete_records": 8,
}
CONFIGS = {
    "retention.ms": ["60000", "3600000", "86400000", "3000000000"],
    "cleanup.policy": ["delete", "compact", "compact,delete"],
    "min.insync.replicas": ["1", "2"],
    "segment.bytes": ["1048576", "1073741824"],
    "unclean.leader.election.enable": ["true", "false"],
    "max.message.bytes": ["1048588", "20971520"],
    "retention.bytes": ["1048576", "1073741824", "-1"],
}


def corpus_policy() -> CompiledPolicy:
    """The example policy plus rules selecting by client id and principal, a topic limit, and
    budgets per principal and of retention, and exceptions in force and expired at the
    agreement's instant."""
    document = yaml.safe_load(EXAMPLE_POLICY.read_text())
    document["rules"] += EXTRA_RULES
    # The example's replica budget leaves its cluster room; the corpus's cluster must reach it.
    for budget in document["budgets"]:
        if budget["name"] == "payments-replicas":
            budget["max_partitions"] = 120
    document["budgets"] += EXTRA_BUDGETS
    document["exceptions"] = [*document.get("exceptions", []), *EXTRA_EXCEPTIONS]
    return load_policy(document, "agreement-policy")


def corpus_cluster() -> InMemoryCluster:
    """Three brokers, the defaults above and the existing topics (ids `id-<name>`)."""
    return corpus_cluster_spec().build()


def corpus_cluster_spec() -> ClusterSpec:
    """The described cluster, as `policy eval --cluster` reads it."""
    topics = [
        {"topic_id": f"id-{t['name']}", "replication_factor": 3, **t}
        | {"assignment": _assignment(t.get("partitions", 1), t.get("replication_factor", 3))}
        for t in EXISTING
    ]
    return parse_cluster({"brokers": 3, "defaults": DEFAULTS, "topics": topics})


def _assignment(partitions: int, replication_factor: int) -> dict[int, list[int]]:
    return {p: [(p + r) % 3 for r in range(replication_factor)] for p in range(partitions)}


def generate(count: int, seed: int = 698) -> list[RequestSpec]:
    """`count` described requests of one topic each."""
    rng = random.Random(seed)
    operations, weights = list(OPERATIONS), list(OPERATIONS.values())
    return [_spec(rng, rng.choices(operations, weights)[0]) for _ in range(count)]


def _spec(rng: random.Random, operation: str) -> RequestSpec:
    existing = rng.random() < 0.75
    name = rng.choice(EXISTING)["name"] if existing else rng.choice(MISSING)
    topic: dict[str, Any] = {"name": name}
    if operation == "create_topics":
        topic["name"] = rng.choice(MISSING) if rng.random() < 0.8 else name
        if rng.random() < 0.15:
            topic["assignment"] = _assignment(rng.choice([1, 3, 6]), rng.choice([1, 3]))
        else:
            topic["partitions"] = rng.choice([-1, 1, 3, 6, 64])
            topic["replication_factor"] = rng.choice([-1, 1, 3])
        topic["configs"] = _configs(rng, allow_null=False)
    elif operation == "alter_configs":
        topic["configs"] = _configs(rng, allow_null=True)
    elif operation == "incremental_alter_configs":
        topic["changes"] = [_change(rng) for _ in range(rng.randint(1, 3))]
    elif operation == "create_partitions":
        topic["count"] = rng.choice([1, 4, 13, 40, 70])
    elif operation == "alter_partition_reassignments":
        topic["partitions"] = {0: rng.choice([[0, 1, 2], [1, 2], None])}
    elif operation == "delete_topics":
        by = rng.random()
        if by < 0.3:
            topic = {"topic_id": f"id-{name}" if existing else UNKNOWN_ID}
    elif operation == "delete_records":
        topic["offsets"] = {0: rng.choice([-1, 100])}
    return parse_request(
        {
            "operation": operation,
            "principal": rng.choice(PRINCIPALS),
            "client_id": rng.choice(CLIENT_IDS),
            "validate_only": rng.random() < 0.1 and operation != "auto_create",
            "topics": [topic],
        }
    )


def _configs(rng: random.Random, *, allow_null: bool) -> dict[str, str | None]:
    names = rng.sample(list(CONFIGS), rng.randint(0, 3))
    return {n: None if allow_null and rng.random() < 0.1 else rng.choice(CONFIGS[n]) for n in names}


def _change(rng: random.Random) -> dict[str, Any]:
    name = rng.choice(list(CONFIGS))
    op = rng.choice(["SET", "SET", "DELETE", "APPEND", "SUBTRACT"])
    if op == "DELETE":
        return {"name": name, "op": op}
    return {"name": name, "op": op, "value": rng.choice(CONFIGS[name])}
