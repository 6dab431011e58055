"""The typed request columns judge every record shape exactly as its JSON text does, the
judgement cache never changes a decision, and lakes written before the typed columns replay."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
import pytest
import yaml
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from harness.audit_data import (
    admin_events,
    broker_config_events,
    example_cluster,
    refused_record,
    write_events,
)
from kafka_policy_proxy.pipeline import worker_cache
from kafka_policy_proxy.pipeline.jobs.replay import run_replay
from kafka_policy_proxy.pipeline.jobs.replay_batches import (
    EPOCH,
    BatchJudge,
    moment_key,
    reads_address,
)
from kafka_policy_proxy.pipeline.jobs.replayer import Replayer
from kafka_policy_proxy.pipeline.sources import audit_events
from kafka_policy_proxy.pipeline.sources.audit_events import read_audit
from kafka_policy_proxy.pipeline.sources.audit_source import AuditSource
from kafka_policy_proxy.pipeline.sources.lake import ingest
from kafka_policy_proxy.pipeline.sources.typed_requests import TYPED_REQUEST_COLUMN
from kafka_policy_proxy.policy.builders import create_request
from kafka_policy_proxy.policy.decision_ids import new_decision_id
from kafka_policy_proxy.policy.decision_log import Stamp, summary_record
from kafka_policy_proxy.policy.decision_summary import summarise
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.judge import ClusterFacts, judge
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.policy.model import Principal, TopicState
from tests.unit.pipeline.jobs.replay_inputs import (
    ALICE_THREADS,
    EXAMPLE,
    LONG_RETENTION,
    TINY_SEGMENTS,
    decisions,
)

SMALL = {"rules": [{"name": "small", "partitions": {"max": 3}}]}
SHAPES = ("topic", "admin", "config", "refusal", "summary")
# The recorded events' times (one every 7 s) straddle these expiries.
FIRST_EXPIRY = "2026-10-01T01:00:00+00:00"
LAST_EXPIRY = "2026-10-01T02:00:00+00:00"


def _with_exceptions() -> CompiledPolicy:
    """The example policy, with two exceptions waiving half its rules each for a while."""
    policy = yaml.safe_load(EXAMPLE.read_text())
    rules = [r["name"] for r in policy["rules"]]
    policy["exceptions"] = [
        {
            "name": f"waiver-{i}",
            "match": {"principals": ["User:*"], "actions": ["create", "alter", "delete"]},
            "waive": rules[i::2],
            "reason": "r",
            "expires": expires,
        }
        for i, expires in enumerate((FIRST_EXPIRY, LAST_EXPIRY))
    ]
    return load_policy(policy, str(EXAMPLE))


def _stamp(moment: str) -> Stamp:
    return Stamp(
        moment, new_decision_id(), "sha256:r", "c1", "p", 1, "h:1", "CreateTopics", 19, 7
    )  # fmt: skip


def _summary() -> dict[str, Any]:
    policy = load_policy(SMALL)
    alice = Principal("User:alice", "app", "10.0.0.2:1")
    asked = [create_request(f"t.{i}", 1 + i % 6, principal=alice) for i in range(50)]
    verdicts = judge(policy, asked, ClusterFacts(example_cluster()))
    summary = summarise([v.decision for v in verdicts if v.decision is not None], 5)
    return summary_record(
        asked[0], _stamp("2026-10-01T00:30:00.000000Z"), decision=summary.decision,
        mode=summary.mode, violations=summary.violations, summary=summary.fields,
    )  # fmt: skip


def _in_use(event: dict[str, Any], minutes: int) -> dict[str, Any]:
    """A delete of a shipping topic, with the in-use facts the proxy read for it."""
    live = TopicState("shipping.live", partitions=3, replication_factor=3)
    request = {
        **event["request"],
        "topic": "shipping.live",
        "action": "delete",
        "alter_kind": None,
        "current": live.to_dict(),
    }
    read_at = "2026-10-01T00:40:00.000000Z"
    written = datetime(2026, 10, 1, 0, 40, tzinfo=UTC) - timedelta(minutes=minutes)
    usage = {
        "topic": "shipping.live",
        "read_at": read_at,
        "latest": {"0": written.strftime("%Y-%m-%dT%H:%M:%S.%fZ")},
        "ends": {"0": 10},
        "groups": [],
        "groups_listed": 0,
    }
    return {**event, "topic": "shipping.live", "request": request, "in_use": usage}


def _every_shape(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every record shape the proxy writes, and requests the typed columns cannot hold."""
    example = load_policy(EXAMPLE.read_text(), str(EXAMPLE))
    calls = [("CreateAcls", "User:ops"), ("ElectLeaders", "User:x")]
    configs = [ALICE_THREADS, LONG_RETENTION, TINY_SEGMENTS]
    shuffled = {**events[1], "request": dict(reversed(list(events[1]["request"].items())))}
    not_an_object = {**events[2], "request": {**events[2]["request"], "requested": []}}
    wrong_type = {**events[3], "request": {**events[3]["request"], "validate_only": "yes"}}
    no_principal = {**events[4], "request": {**events[4]["request"], "principal": None}}
    odd_action = {**events[5], "request": {**events[5]["request"], "action": "explode"}}
    return [
        *events,
        *admin_events(example, calls),
        *broker_config_events(example, configs, example_cluster()),
        refused_record(),
        _summary(),
        _in_use(events[6], 1),
        _in_use(events[7], 600),
        shuffled,
        not_an_object,
        wrong_type,
        no_principal,
        odd_action,
    ]


def _columns(spark: SparkSession, path: Path) -> pa.Table:
    """The columns replay's UDF gets (typed, text, micros, in_use), in the file's order."""
    events = read_audit(spark, [str(path)]).lines.where(F.col("problem").isNull())
    return (
        events.orderBy("line")
        .select(
            TYPED_REQUEST_COLUMN,
            "request",
            F.unix_micros("time").alias("micros"),
            "in_use",
        )
        .toArrow()
        .combine_chunks()
    )


@pytest.fixture(scope="module")
def columns(
    spark: SparkSession, events: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> tuple[pa.Table, list[dict[str, Any]]]:
    """Every shape's events, and the columns Spark reads of them."""
    recorded = _every_shape(events)
    path = tmp_path_factory.mktemp("shapes") / "audit.jsonl"
    write_events(path, recorded)
    return _columns(spark, path), recorded


def _by_text(replayer: Replayer, table: pa.Table) -> list[Any]:
    moments = [
        None if us is None else EPOCH + timedelta(microseconds=us)
        for us in table["micros"].to_pylist()
    ]
    return [
        replayer.replay(text, moment, used)
        for text, moment, used in zip(
            table["request"].to_pylist(), moments, table["in_use"].to_pylist(), strict=True
        )
    ]


def _by_typed(judge: BatchJudge, table: pa.Table) -> list[Any]:
    typed = table[TYPED_REQUEST_COLUMN].combine_chunks()
    untyped = pc.if_else(pc.is_null(typed), table["request"], pa.scalar(None, pa.string()))
    rows, _ = judge.judge(typed, untyped.combine_chunks(), table["micros"], table["in_use"])
    return rows


def test_every_record_shape_the_proxy_writes_is_typed(
    columns: tuple[pa.Table, list[dict[str, Any]]],
) -> None:
    table, recorded = columns
    typed = table[TYPED_REQUEST_COLUMN].to_pylist()
    shapes = [None if t is None else next(s for s in SHAPES if t[s] is not None) for t in typed]
    assert all(sum(t[s] is not None for s in SHAPES) == 1 for t in typed if t is not None)
    # The last five: another key order, three the text must judge, an unknown action.
    assert None not in shapes[:-5]
    assert shapes[-5:] == ["topic", None, None, None, "topic"]
    assert {s: shapes.count(s) for s in SHAPES} == {
        "topic": len(recorded) - 3 - 2 - 3 - 1 - 1,
        "admin": 2,
        "config": 3,
        "refusal": 1,
        "summary": 1,
    }


@pytest.mark.parametrize("snapshot", [False, True], ids=["no-snapshot", "snapshot"])
@pytest.mark.parametrize("which", ["example", "exceptions"])
def test_typed_columns_judge_every_shape_as_the_text_does(
    columns: tuple[pa.Table, list[dict[str, Any]]], which: str, snapshot: bool
) -> None:
    table, _ = columns
    policy = (
        load_policy(EXAMPLE.read_text(), str(EXAMPLE)) if which == "example" else _with_exceptions()
    )
    cluster = example_cluster() if snapshot else None
    expected = _by_text(Replayer(policy, cluster), table)
    assert _by_typed(BatchJudge(Replayer(policy, cluster), size=0), table) == expected
    assert _by_typed(BatchJudge(Replayer(policy, cluster)), table) == expected
    decided = {row[0] for row in expected}
    assert {"allowed", "denied", "unknown", "error"} <= decided


def test_the_cache_never_changes_a_decision_across_times_and_in_use_facts(
    columns: tuple[pa.Table, list[dict[str, Any]]],
) -> None:
    table, _ = columns
    policy = _with_exceptions()
    first, last = (
        (datetime.fromisoformat(e) - EPOCH) // timedelta(microseconds=1)
        for e in (FIRST_EXPIRY, LAST_EXPIRY)
    )
    # The same requests again at instants around each expiry, and with no time.
    instants = (first - 1, first, last - 1, last, last + 1, None)
    copies = [table]
    for moment in instants:
        micros = pa.array([moment] * table.num_rows, pa.int64())
        copies.append(table.set_column(2, "micros", micros))
    repeated = pa.concat_tables(copies).combine_chunks()
    cluster = example_cluster()
    judge = BatchJudge(Replayer(policy, cluster))
    cached = _by_typed(judge, repeated)
    assert cached == _by_text(Replayer(policy, cluster), repeated)
    assert judge.hits > 0 and judge.lookups == repeated.num_rows
    size = table.num_rows
    copy = [cached[size * (i + 1) : size * (i + 2)] for i in range(len(instants))]
    # Each exception waived until its expiry: the time was in the key as far as it mattered.
    assert copy[0] != copy[1] and copy[1] == copy[2] and copy[2] != copy[3]
    assert copy[3] == copy[4] == copy[5]
    # The two in-use deletes differ only in their in-use facts, and are judged apart.
    used = [at for at, facts in enumerate(table["in_use"].to_pylist()) if facts]
    assert [copy[4][at][:2] for at in used] == [
        ("denied", ["shipping-in-use"]),
        ("allowed", []),
    ]


def test_the_time_counts_only_as_far_as_the_exceptions_expire() -> None:
    policy = _with_exceptions()
    key = moment_key(policy)
    first = (datetime.fromisoformat(FIRST_EXPIRY) - EPOCH) // timedelta(microseconds=1)
    last = (datetime.fromisoformat(LAST_EXPIRY) - EPOCH) // timedelta(microseconds=1)
    assert key(None) is None
    assert key(0) == key(first - 1) != key(first) == key(last - 1) != key(last) == key(last * 2)
    plain = moment_key(load_policy(SMALL))
    assert plain(0) == plain(first) != plain(None)


def test_a_lake_ingested_before_the_typed_columns_still_replays(
    spark: SparkSession,
    events: list[dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "audit").mkdir()
    old, new = tmp_path / "audit" / "old.jsonl", tmp_path / "audit" / "new.jsonl"
    write_events(old, events[:700])
    write_events(new, events[700:])
    lake = str(tmp_path / "lake")
    policy = str(EXAMPLE)

    def replayed(source: AuditSource | list[str], name: str) -> dict[Any, dict[str, Any]]:
        run_replay(spark, policy, source, str(tmp_path / name))
        return decisions(spark, tmp_path / name)

    # A batch as ingest wrote it before: the text only.
    with monkeypatch.context() as patched:
        patched.setattr(audit_events, "with_typed_request", lambda lines: lines)
        ingest(spark, [str(old)], lake)
    assert TYPED_REQUEST_COLUMN not in spark.read.parquet(f"{lake}/table=events").columns
    assert replayed(AuditSource(lake=lake), "old") == replayed([str(old)], "old-raw")
    ingest(spark, [str(new)], lake)
    both = replayed(AuditSource(lake=lake), "both")
    assert both == replayed([str(old), str(new)], "raw")
    assert len(both) == len(events)
    summary = json.loads((tmp_path / "both" / "summary.json").read_text())
    assert summary["cache"]["lookups"] == len(events)


def test_no_built_in_check_reads_a_clients_address() -> None:
    # The cache's key leaves the address out unless plugins or Java policies can read it
    # (`reads_address`): a built-in check that read it would need it back in the key.
    policy = Path(__file__).resolve().parents[4] / "kafka_policy_proxy" / "policy"
    naming = {
        str(p.relative_to(policy)) for p in policy.rglob("*.py") if "address" in p.read_text()
    }
    assert naming == {
        "model.py", "decision_reader.py", "offline/request_spec.py", "offline/scenario.py"
    }  # fmt: skip
    assert reads_address(load_policy(SMALL)) is False


def test_a_principal_from_typed_fields_is_the_texts() -> None:
    # The fields' order is the key's: a principal is (name, client_id, address).
    replayer = Replayer(load_policy(SMALL), None)
    request = create_request("t", 1, principal=Principal("User:a", "cli", "10.0.0.1:5"))
    text = request.to_dict()
    fields = (
        text["topic"], text["topic_id"], text["action"], text["alter_kind"],
        ("User:a", "cli", "10.0.0.1:5"), text["validate_only"],
        json.dumps(text["requested"]), None, (),
    )  # fmt: skip
    assert replayer.reader.topic(fields) == replayer.reader.read(json.dumps(text))


def _compiled_in(policy_text: str) -> Callable[[Iterable[Any]], Iterator[tuple[int, int]]]:
    def task(_: Iterable[Any]) -> Iterator[tuple[int, int]]:
        yield os.getpid(), id(worker_cache.compiled(policy_text, "<candidate>"))

    return task


def test_the_candidate_is_compiled_once_per_python_worker(spark: SparkSession) -> None:
    text = yaml.safe_dump(SMALL)
    tasks = spark.sparkContext.parallelize(range(16), 16).mapPartitions(_compiled_in(text))
    seen = tasks.collect()
    by_worker: dict[int, set[int]] = {}
    for pid, policy in seen:
        by_worker.setdefault(pid, set()).add(policy)
    # Every task a worker ran got the one policy it compiled; workers are reused.
    assert all(len(policies) == 1 for policies in by_worker.values())
    assert len(by_worker) < len(seen)
