"""Audit events made the way the proxy makes them: real requests, the real engine, real events.

Shared by the pipeline tests (tests/unit/pipeline/) and bench/pipeline_bench.py.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kafka_policy_proxy.codec.api_classes import API_CLASSES
from kafka_policy_proxy.policy.admin_apis import AdminRequest
from kafka_policy_proxy.policy.broker_configs import BrokerConfigRequest, ConfigResource
from kafka_policy_proxy.policy.builders import (
    create_partitions_request,
    create_request,
    delete_records_request,
    delete_topic_request,
    incremental_alter_configs_request,
    reassignment_request,
)
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.decision_log import (
    Stamp,
    admin_record,
    broker_config_record,
    decision_record,
    refusal_record,
)
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.judge import ClusterFacts, judge, judge_admin, judge_broker_configs
from kafka_policy_proxy.policy.model import (
    ConfigChange,
    ConfigOp,
    Principal,
    TopicRequest,
    TopicState,
)
from kafka_policy_proxy.policy.offline.snapshot_format import SET_ON_TOPIC

START = datetime(2026, 10, 1, tzinfo=UTC)
PRINCIPALS = (
    "User:alice",
    "User:bob",
    "User:carol",
    "User:platform-admin",
    "User:streams-payments",
    "User:ANONYMOUS",
)
DEFAULTS = {
    "cleanup.policy": "delete",
    "retention.ms": "604800000",
    "min.insync.replicas": "2",
    "max.message.bytes": "1048588",
    "segment.bytes": "1073741824",
    "segment.ms": "604800000",
    "unclean.leader.election.enable": "false",
    "compression.type": "producer",
}
ADMIN_API_KEYS = {entry.name: key for key, entry in API_CLASSES.items()}
API = {  # action / alter kind -> (api name, api key, api version)
    "create": ("CreateTopics", 19, 7),
    "configs": ("IncrementalAlterConfigs", 44, 1),
    "partitions": ("CreatePartitions", 37, 3),
    "reassignment": ("AlterPartitionReassignments", 45, 0),
    "delete": ("DeleteTopics", 20, 6),
    "delete_records": ("DeleteRecords", 21, 2),
}


def example_cluster(topics: int = 40) -> InMemoryCluster:
    """Three brokers, the defaults above, and `topics` existing topics (some breaking rules)."""
    states = []
    for i in range(topics):
        name = ("orders.v1", "payments.ledger", "sandbox.tmp", "Legacy_Topic", "clicks.raw")[i % 5]
        partitions = (6, 12, 3, 1, 64)[i % 5]
        rf = 1 if i % 7 == 0 else 3
        states.append(
            TopicState(
                name=f"{name}.{i}" if i >= 5 else name,
                topic_id=f"{i:08x}-0000-4000-8000-{i:012x}",
                partitions=partitions,
                replication_factor=rf,
                assignment=tuple((p, tuple(range(1, rf + 1))) for p in range(partitions)),
                configs=InMemoryCluster.of(defaults=DEFAULTS).defaults.merged(
                    {"retention.ms": str(3_600_000 * (1 + i % 1000))}
                ),
            )
        )
    return InMemoryCluster.of(states, brokers=3, defaults=DEFAULTS)


def write_snapshot(path: Path, cluster: InMemoryCluster, cluster_id: str = "example") -> Path:
    """The cluster in the snapshot format pipeline/snapshots.py reads (docs/snapshot.md); a
    topic's overrides become its config sources, unknown ones none (as in older snapshots)."""
    lines: list[dict[str, Any]] = [
        {
            "kind": "cluster",
            "schema": 1,
            "cluster_id": cluster_id,
            "taken_at": "2026-10-01T00:00:00.000000Z",
            "brokers": [{"id": i, "host": "b", "port": 9092} for i in range(cluster.brokers)],
            "defaults": dict(cluster.defaults),
        }
    ]
    lines += [_topic_line(cluster_id, t) for t in cluster.topics]
    lines.append({"kind": "end", "cluster_id": cluster_id, "topics": len(cluster.topics)})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _topic_line(cluster_id: str, state: TopicState) -> dict[str, Any]:
    line = {"kind": "topic", "cluster_id": cluster_id, **state.to_dict()}
    overrides = line.pop("overrides", None)
    if overrides is not None:
        # As `kafka-policy-proxy snapshot` says which configs are set on the topic itself.
        line["config_sources"] = {
            key: SET_ON_TOPIC if key in overrides else "DYNAMIC_DEFAULT_BROKER_CONFIG"
            for key in state.configs
        }
    return line


def random_request(rng: random.Random, cluster: InMemoryCluster) -> tuple[TopicRequest, str]:
    """One per-topic request as a client would send it, with its API kind."""
    principal = Principal(rng.choice(PRINCIPALS), f"client-{rng.randrange(20)}", "10.0.0.7:5000")
    existing = rng.choice(cluster.topics) if cluster.topics else None
    kind = rng.choices(
        ["create", "configs", "partitions", "reassignment", "delete", "delete_records"],
        weights=[40, 25, 10, 5, 12, 8],
    )[0]
    if kind == "create" or existing is None:
        name = rng.choice(["orders", "payments", "sandbox", "clicks", "Bad_Name", "tmp"])
        name += rng.choice([".v1", ".raw", ".events", "", "_x"]) + f".{rng.randrange(500)}"
        configs = []
        if rng.random() < 0.5:
            configs.append(("retention.ms", str(rng.choice([60_000, 3_600_000, 86_400_000]))))
        if rng.random() < 0.2:
            configs.append(("segment.bytes", str(rng.choice([1 << 20, 1 << 30]))))
        request = create_request(
            name,
            rng.choice([-1, 1, 3, 6, 12, 64]),
            rng.choice([-1, 1, 2, 3]),
            configs=configs,
            principal=principal,
            validate_only=rng.random() < 0.1,
        )
        return request, "create"
    if kind == "configs":
        ops = [("retention.ms", "SET", str(rng.choice([60_000, 3_600_000, 3_000_000_000])))]
        if rng.random() < 0.3:
            ops.append(("cleanup.policy", "SET", rng.choice(["delete", "compact"])))
        request = incremental_alter_configs_request(existing.name, ops, principal=principal)
        return request, kind
    if kind == "partitions":
        count = existing.partitions + rng.choice([1, 6, 30])
        return create_partitions_request(existing.name, count, principal=principal), kind
    if kind == "reassignment":
        moves = [(0, [1, 2, 3])]
        return reassignment_request(existing.name, moves, principal=principal), kind
    if kind == "delete":
        return delete_topic_request(existing.name, principal=principal), kind
    offsets = [(0, rng.choice([-1, 100]))]
    return delete_records_request(existing.name, offsets, principal=principal), kind


def generate_events(
    policy: CompiledPolicy,
    cluster: InMemoryCluster,
    count: int,
    *,
    seed: int = 1,
    start: datetime = START,
    spacing: timedelta = timedelta(seconds=7),
) -> Iterator[dict[str, Any]]:
    """`count` events as the proxy would log them: judged with the facts the policy asks for."""
    rng = random.Random(seed)
    source = ClusterFacts(cluster)
    for i in range(count):
        request, kind = random_request(rng, cluster)
        (verdict,) = judge(policy, [request], source)
        assert verdict.decision is not None  # every generated request names its topic
        api, api_key, api_version = API[kind]
        yield decision_record(
            verdict.request,
            verdict.decision,
            Stamp(
                time=_stamp(start + spacing * i),
                decision_id=f"{seed:04x}{i:028x}",
                policy_revision=policy.revision,
                cluster_id="example",
                proxy_id="proxy-1",
                conn=rng.randrange(1, 200),
                client=verdict.request.principal.address,
                api=api,
                api_key=api_key,
                api_version=api_version,
            ),
        )


def write_events(path: Path, events: Iterable[dict[str, Any]]) -> int:
    """Write events as JSON lines, as AuditLog does; returns how many."""
    written = 0
    with path.open("w", encoding="utf-8") as out:
        for event in events:
            out.write(json.dumps(event, separators=(",", ":")) + "\n")
            written += 1
    return written


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def write_bulk(
    directory: Path,
    policy: CompiledPolicy,
    count: int,
    *,
    files: int = 10,
    distinct: int = 100_000,
    seed: int = 1,
) -> int:
    """`count` events in `files` files, like rotated logs: `distinct` real events, re-stamped.

    Judging every event would take minutes for millions; re-stamping a pool keeps the mix of
    requests and decisions real while the times (one event a second) advance and every
    decision gets an id of its own, as the proxy's do (the lake keeps each id once).
    """
    cluster = example_cluster()
    prefix = len('{"time":"2026-10-01T00:00:00.000000Z"')
    pool = []
    for event in generate_events(policy, cluster, min(count, distinct), seed=seed):
        text = json.dumps(event, separators=(",", ":"))[prefix:]
        head, _, rest = text.partition(f'"decision_id":"{event["decision_id"]}"')
        pool.append((head + '"decision_id":"', '"' + rest))
    directory.mkdir(parents=True, exist_ok=True)
    per_file = -(-count // files)
    written = 0
    for f in range(files):
        with (directory / f"audit-{f:04d}.jsonl").open("w", encoding="utf-8") as out:
            batch = []
            for i in range(written, min(count, written + per_file)):
                stamp = _stamp(START + timedelta(seconds=i))
                head, tail = pool[i % len(pool)]
                batch.append(f'{{"time":"{stamp}"{head}{seed:04x}{i:028x}{tail}\n')
                if len(batch) == 10_000:
                    out.write("".join(batch))
                    batch.clear()
            out.write("".join(batch))
        written = min(count, written + per_file)
    return written


def admin_events(
    policy: CompiledPolicy, calls: Iterable[tuple[str, str]], *, start: datetime = START
) -> Iterator[dict[str, Any]]:
    """Records of admin API calls (API name, principal), judged as the proxy judges them."""
    for i, (api, principal) in enumerate(calls):
        decision = judge_admin(policy, AdminRequest(api, Principal(principal, "cli", "10.0.0.9:1")))
        yield admin_record(
            decision,
            Stamp(
                time=_stamp(start + timedelta(seconds=i)),
                decision_id=f"admin{i:027x}",
                policy_revision=policy.revision,
                cluster_id="example",
                proxy_id="proxy-1",
                conn=i + 1,
                client="10.0.0.9:1",
                api=decision.request.api,
                api_key=ADMIN_API_KEYS[api],
                api_version=0,
            ),
        )


# A config change of a resource that is not a topic: principal, resource kind, resource name
# ("" for the cluster default) and (key, op, value) changes.
ConfigCall = tuple[str, str, str, list[tuple[str, str, str | None]]]


def broker_config_events(
    policy: CompiledPolicy,
    calls: Iterable[ConfigCall],
    cluster: InMemoryCluster,
    *,
    start: datetime = START,
) -> Iterator[dict[str, Any]]:
    """Records of broker, cluster-default, logger, group or client-metrics config changes,
    judged as the proxy judges them (a new topic-config default against `cluster`)."""
    for i, (principal, resource, name, changes) in enumerate(calls):
        request = BrokerConfigRequest(
            ConfigResource(resource),
            name,
            Principal(principal, "cli", "10.0.0.9:1"),
            tuple(ConfigChange(key, ConfigOp(op), value) for key, op, value in changes),
        )
        (decision,) = judge_broker_configs(policy, [request], ClusterFacts(cluster))
        yield broker_config_record(
            decision,
            Stamp(
                time=_stamp(start + timedelta(seconds=i)),
                decision_id=f"config{i:026x}",
                policy_revision=policy.revision,
                cluster_id="example",
                proxy_id="proxy-1",
                conn=i + 1,
                client="10.0.0.9:1",
                api="IncrementalAlterConfigs",
                api_key=44,
                api_version=1,
            ),
        )


def refused_record(
    api: str = "AlterUserScramCredentials", sasl_state: str = "never started"
) -> dict[str, Any]:
    """The record of a request the proxy refused before SASL authentication completed."""
    return refusal_record(
        Stamp(
            time="2026-11-22T04:47:01.123456Z",
            decision_id="0" * 32,
            policy_revision="sha256:0123456789abcdef",
            cluster_id=None,
            proxy_id="proxy-a",
            conn=4,
            client="10.1.2.3:5",
            api=api,
            api_key=ADMIN_API_KEYS[api],
            api_version=0,
        ),
        client_id="",
        listener="bootstrap",
        sasl_state=sasl_state,
    )


# Every class of bad line, made from good events: (line, kind, reason) as the pipeline must
# count it. Shared by the reading tests and the test that every job counts alike.
def bad_lines(good: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """One line of each fault class, with the kind and reason it must be counted under."""
    topic = next(e for e in good if e["resource_type"] == "topic")

    def changed(**fields: Any) -> str:
        return json.dumps(topic | fields)

    def without(name: str) -> str:
        return json.dumps({k: v for k, v in topic.items() if k != name})

    v1 = {k: v for k, v in topic.items() if k not in ("resource_type", "resource")} | {"schema": 1}
    violation = {"rule": "r", "message": "[r] m", "mode": "sometimes"}
    return [
        ("", "blank", "blank line"),
        (" \t ", "blank", "blank line"),
        ("not json", "malformed", "not valid JSON"),
        (json.dumps(topic)[:-7], "malformed", "not valid JSON"),
        ("[1, 2]", "malformed", "not a JSON object: array"),
        ('"a string"', "malformed", "not a JSON object: string"),
        (without("schema"), "malformed", "missing field schema"),
        (changed(schema="2"), "malformed", "field schema: expected integer, got string"),
        (changed(schema=4), "unknown_version", "schema version 4"),
        (changed(schema=0), "unknown_version", "schema version 0"),
        (without("principal"), "malformed", "missing field principal"),
        (
            changed(validate_only="true"),
            "malformed",
            "field validate_only: expected boolean, got string",
        ),
        (changed(time=1764000000), "malformed", "field time: expected string, got integer"),
        (
            changed(time="2026-10-01T00:00:00Z"),
            "malformed",
            "field time: '2026-10-01T00:00:00Z' is not an RFC 3339 time with microseconds",
        ),
        (
            changed(time="2026-10-01T00:00:00.000000+20:00"),
            "malformed",
            "field time: '2026-10-01T00:00:00.000000+20:00' has an offset beyond ±18:00",
        ),
        (changed(conn="7"), "malformed", "field conn: expected integer, got string"),
        (changed(conn=1.5), "malformed", "field conn: expected integer, got number"),
        (changed(principal=5), "malformed", "field principal: expected string, got integer"),
        (changed(api_key=40000), "malformed", "field api_key: 40000 is out of range"),
        (changed(decision="maybe"), "malformed", "field decision: unknown value 'maybe'"),
        (
            changed(violations=[violation]),
            "malformed",
            "field violations: [0] mode: unknown value 'sometimes'",
        ),
        (changed(extra=1), "malformed", "unknown field extra"),
        (json.dumps(v1), "malformed", "field decision_id is not in schema 1"),
        (changed(topic=None), "malformed", "field topic: null in a topic record"),
        (
            changed(action="admin_api"),
            "malformed",
            "action admin_api on resource type topic",
        ),
    ]
