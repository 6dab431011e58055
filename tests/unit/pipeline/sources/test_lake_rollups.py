"""The lake's rollups agree with its events, counted in plain Python, for every fault class:
bad lines of each kind, a log ingested again as it grew, decisions already in the lake
(dropped repeats), a batch that died before its commit, summary records weighing many topics,
audit-mode rules, waived violations and budgets. A report over a window reads the right
hours, and a lake ingested before rollups existed reports the same numbers."""

from __future__ import annotations

import json
import shutil
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bench.report_stages import report_stages
from harness.audit_data import bad_lines, example_cluster, generate_events, write_events
from kafka_policy_proxy.pipeline.jobs.report import run_report
from kafka_policy_proxy.pipeline.sources.audit_source import AuditSource
from kafka_policy_proxy.pipeline.sources.lake import committed, ingest
from kafka_policy_proxy.pipeline.sources.lake_rollups import (
    BUDGETS,
    HOURS,
    LINES,
    TOPIC_TOTALS,
    TOPICS,
    WAIVERS,
)
from kafka_policy_proxy.policy.loader import load_policy
from tests.unit.pipeline.jobs.test_summary_records import _events as summary_events

REPO = Path(__file__).resolve().parents[4]
POLICY = REPO / "examples" / "policy.yaml"
EXAMPLE = load_policy(POLICY.read_text(), "policy.yaml")
EXPIRES = ("2027-01-31T18:00:00.000000Z", "2026-12-01T00:00:00.000000Z")


def _waived(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every 9th event with a waived violation (every 18th names it twice: counted once)."""
    out = []
    for i, recorded in enumerate(events):
        event = recorded
        if i % 9 == 0:
            waiver = {
                "rule": "naming",
                "exception": f"exception-{i % 2}",
                "ticket": None if i % 2 else "OPS-1",
                "expires": EXPIRES[i % 2],
                "message": f"[naming] topic t{i} waived",
            }
            event = event | {"waived": [waiver] * (2 if i % 18 == 0 else 1)}
        out.append(event)
    return out


@dataclass(frozen=True)
class Lake:
    """A lake built by several ingests, and the events and bad lines it must hold once."""

    root: Path
    lake: str
    events: list[dict[str, Any]]
    bad: list[tuple[str, str, str]]


@pytest.fixture(scope="module")
def built(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Lake:
    root = tmp_path_factory.mktemp("rollups")
    spacing = timedelta(minutes=23)  # 300 events over nearly five days
    events = _waived(
        list(generate_events(EXAMPLE, example_cluster(), 300, seed=11, spacing=spacing))
    )
    lake = str(root / "lake")
    logs = root / "logs"
    logs.mkdir()
    # 1. A log with every class of bad line among its events.
    faults = bad_lines(events)
    good = [json.dumps(e) for e in events[:150]]
    (logs / "audit.jsonl").write_text(
        "\n".join([*good[:50], *(f[0] for f in faults), *good[50:]]) + "\n"
    )
    ingest(spark, [str(logs)], lake)
    # 2. The log grew (only its new lines are taken); a log of summary records beside it.
    with (logs / "audit.jsonl").open("a") as log:
        log.write("".join(json.dumps(e) + "\n" for e in events[150:200]))
    summaries = summary_events()
    write_events(logs / "summary.jsonl", summaries)
    ingest(spark, [str(logs)], lake)
    # 3. The same decisions from elsewhere (100-199 again, dropped), with 200-249 new.
    other = root / "from-the-topic"
    other.mkdir()
    write_events(other / "audit.jsonl", events[100:250])
    assert ingest(spark, [str(other)], lake)["repeated_events"] == 100
    # 4. A batch that died before its commit: its rollups are written, never read; the next
    # run takes the file again.
    late = root / "late"
    late.mkdir()
    write_events(late / "audit.jsonl", events[250:])
    died = ingest(spark, [str(late)], lake)
    (Path(lake) / "_manifest" / f"{died['batch']}.json").unlink()
    ingest(spark, [str(late)], lake)
    return Lake(root, lake, [*events, *summaries], faults)


def _micros(moment: datetime) -> int:
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def _time(event: dict[str, Any]) -> datetime:
    return datetime.strptime(event["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def _hour(event: dict[str, Any]) -> int:
    return _micros(_time(event).replace(minute=0, second=0, microsecond=0))


def _counted(event: dict[str, Any]) -> list[tuple[str, str | None, str | None, str | None, int]]:
    """(decision, rule, rule_mode, least message, events) rows of an event, as rollups count."""
    if event.get("summary"):
        return [
            (c["decision"], c["rule"], c["rule_mode"], None, c["topics"])
            for c in event["summary"]["counts"]
        ]
    rows: list[tuple[str, str | None, str | None, str | None, int]] = [
        (event["decision"], None, None, None, 1)
    ]
    messages: dict[tuple[str, str], list[str]] = defaultdict(list)
    for v in event["violations"]:
        messages[v["rule"], v["mode"]].append(v["message"])
    for (rule, mode), texts in messages.items():
        rows.append((event["decision"], rule, mode, min(texts), 1))
    return rows


def _summed(spark: SparkSession, lake: str, name: str, keys: list[str], **aggs: Any) -> dict:
    """The committed batches' rollup `name`, summed per key, as {key: (aggregates...)}."""
    names = [b["batch"] for b in committed(spark, lake)]
    table = spark.read.option("basePath", lake).parquet(f"{lake}/table={name}")
    table = table.where(F.col("batch").isin(*names))
    times = [k for k in keys if k in ("hour", "last_seen")]
    columns = [F.unix_micros(k).alias(k) if k in times else F.col(k) for k in keys]
    rows = (
        table.select(*columns, *aggs.values())
        .groupBy(*keys)
        .agg(
            *(
                F.sum(c).alias(c) if c in ("events", "records", "lines") else F.min(c).alias(c)
                for c in aggs
            )
        )
    )
    return {tuple(r[k] for k in keys): tuple(r[c] for c in aggs) for r in rows.collect()}


def test_hours_agree_with_the_events(spark: SparkSession, built: Lake) -> None:
    expected: Counter[tuple[Any, ...]] = Counter()
    records: Counter[tuple[Any, ...]] = Counter()
    for e in built.events:
        for i, (decision, rule, mode, _, n) in enumerate(_counted(e)):
            key = (_hour(e), e["action"], e["api"], decision, e["mode"], e["principal"], rule, mode)
            expected[key] += n
            records[key] += i == 0
    keys = ["hour", "action", "api", "decision", "mode", "principal", "rule", "rule_mode"]
    got = _summed(spark, built.lake, HOURS, keys, events=F.col("events"), records=F.col("records"))
    assert got == {k: (n, records[k]) for k, n in expected.items()}
    # The fault classes are there: summary records weigh their topics, audit rules fired.
    assert (
        sum(n for (_, _, _, _, _, _, rule, _), (n, _) in got.items() if rule is None) == 303 + 1000
    )
    assert any(k[7] == "audit" for k in got)


def test_topics_agree_with_the_events(spark: SparkSession, built: Lake) -> None:
    expected: Counter[tuple[Any, ...]] = Counter()
    examples: dict[tuple[Any, ...], str] = {}
    for e in built.events:
        resource = (e["resource_type"], e["resource"])
        for decision, rule, mode, message, n in _counted(e):
            key = (
                e["time"][:10],
                *resource,
                e["topic"],
                e["principal"],
                decision,
                rule,
                mode,
            )
            expected[key] += n
            if message is not None:
                examples[key] = min(examples.get(key, message), message)
    keys = [
        "day",
        "resource_type",
        "resource",
        "topic",
        "principal",
        "decision",
        "rule",
        "rule_mode",
    ]
    got = _summed(
        spark,
        built.lake,
        TOPICS,
        keys,
        events=F.col("events"),
        example=F.col("example"),
    )
    got = {(str(k[0]), *k[1:]): v for k, v in got.items()}
    assert got == {k: (n, examples.get(k)) for k, n in expected.items()}
    # The batches' totals: the same without the day.
    totals: Counter[tuple[Any, ...]] = Counter()
    least: dict[tuple[Any, ...], str] = {}
    for key, n in expected.items():
        totals[key[1:]] += n
        if key in examples:
            least[key[1:]] = min(least.get(key[1:], examples[key]), examples[key])
    got = _summed(
        spark, built.lake, TOPIC_TOTALS, keys[1:], events=F.col("events"), example=F.col("example")
    )
    assert got == {k: (n, least.get(k)) for k, n in totals.items()}


def test_waivers_and_budgets_agree_with_the_events(spark: SparkSession, built: Lake) -> None:
    waived: Counter[tuple[Any, ...]] = Counter()
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for e in sorted(built.events, key=lambda e: e["time"]):
        for w in {
            (w["exception"], w["rule"], w["ticket"], w["expires"]) for w in e.get("waived") or ()
        }:
            waived[(e["time"][:10], *w, e["principal"], e["topic"])] += 1
        for b in e.get("budgets") or ():
            latest[e["time"][:10], b["name"]] = b
    keys = ["day", "exception", "rule", "ticket", "expires", "principal", "topic"]
    got = _summed(spark, built.lake, WAIVERS, keys, events=F.col("events"))
    assert {(str(k[0]), *k[1:]): v[0] for k, v in got.items()} == dict(waived)
    assert sum(waived.values()) == 34  # every 9th of 300 events, twice-named ones once
    # Per day and budget, each batch's latest values: the latest of those is the day's.
    names = [b["batch"] for b in committed(spark, built.lake)]
    rows = (
        spark.read.parquet(f"{built.lake}/table={BUDGETS}")
        .where(F.col("batch").isin(*names))
        .select("day", "budget", "unit", "limit", "usage", "added", F.unix_micros("last_seen"))
        .collect()
    )
    days: dict[tuple[str, str], Any] = {}
    for row in sorted(rows, key=lambda r: r[-1]):
        days[str(row["day"]), row["budget"]] = {
            k: row[k] for k in ("unit", "limit", "usage", "added")
        }
    assert days == {
        key: {k: b[k] for k in ("unit", "limit", "usage", "added")} for key, b in latest.items()
    }
    assert latest, "the example policy's budgets should have been judged"


def test_bad_lines_keep_their_first_line_and_sample(spark: SparkSession, built: Lake) -> None:
    expected: dict[tuple[str, str], list[Any]] = {}
    for at, (line, kind, problem) in enumerate(built.bad, start=51):
        entry = expected.setdefault((kind, problem), [0, at, line[:200]])
        entry[0] += 1
    got = _summed(
        spark,
        built.lake,
        LINES,
        ["kind", "problem", "first_line", "sample"],
        lines=F.col("lines"),
    )
    assert {(k[0], k[1]): [v[0], k[2], k[3]] for k, v in got.items()} == expected


def test_a_report_reads_the_rollups_and_counts_the_events_once(
    spark: SparkSession, built: Lake
) -> None:
    summary = run_report(spark, AuditSource(lake=built.lake), str(built.root / "report"))
    decisions = Counter()
    for e in built.events:
        for decision, rule, _, _, n in _counted(e):
            if rule is None:
                decisions[decision] += n
    assert summary["decisions"] == {d: decisions[d] for d in summary["decisions"]}
    assert summary["lines"]["total"] == len(built.events) + len(built.bad)
    assert summary["warnings"] == []
    exceptions = {(x["exception"], x["expires"]): x["waivers"] for x in summary["exceptions"]}
    assert exceptions == {
        ("exception-1", EXPIRES[1]): 17,
        ("exception-0", EXPIRES[0]): 17,
    }
    assert [x["expires"] for x in summary["exceptions"]] == sorted(EXPIRES)  # soonest first
    assert summary["budgets"] and all(b["limit"] > 0 for b in summary["budgets"])
    denied = Counter(e["topic"] for e in built.events if e["decision"] == "denied" and e["topic"])
    assert summary["topics_denied"] == len(denied)
    top = summary["top_topics"][0]
    assert top["denials"] == max(denied.values()) and top["example"].startswith(f"[{top['rule']}]")


def test_a_window_reads_only_its_hours(spark: SparkSession, built: Lake) -> None:
    times = sorted(_time(e) for e in built.events)
    since = times[len(times) // 3].replace(minute=0, second=0, microsecond=0) + timedelta(
        minutes=30
    )
    until = times[2 * len(times) // 3].replace(minute=0, second=0, microsecond=0)
    start = since.replace(minute=0)  # from the hour of `since`
    summary = run_report(
        spark, AuditSource(lake=built.lake), str(built.root / "window"), since=since, until=until
    )
    inside = [e for e in built.events if start <= _time(e) < until]
    decisions = Counter()
    for e in inside:
        for decision, rule, _, _, n in _counted(e):
            if rule is None:
                decisions[decision] += n
    assert summary["decisions"] == {d: decisions[d] for d in summary["decisions"]}
    assert summary["time_range"]["first"] == min(e["time"] for e in inside)
    assert summary["window"]["since"] == since.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    # Bad lines have no time: left out of a window.
    assert summary["lines"]["total"] == summary["lines"]["events"]
    denials = Counter(e["principal"] for e in inside if e["decision"] == "denied")
    ranked = sorted(denials.items(), key=lambda p: (-p[1], p[0]))[:10]
    assert [(p["principal"], p["denials"]) for p in summary["top_principals"]] == ranked
    empty = run_report(
        spark,
        AuditSource(lake=built.lake),
        str(built.root / "none"),
        since=datetime(2030, 1, 1, tzinfo=UTC),
    )
    assert empty["events"] == 0


def test_a_lake_of_every_rollups_version_reports_the_same(spark: SparkSession, built: Lake) -> None:
    # Batches of rollups version 1 have no topic totals: their day rows are summed instead;
    # a batch from before rollups has them derived from its events.
    old = built.root / "mixed-lake"
    shutil.copytree(built.lake, old)
    manifests = sorted((old / "_manifest").glob("*.json"))
    for manifest in manifests[:3]:
        batch = json.loads(manifest.read_text())
        v1 = manifest != manifests[2]
        manifest.write_text(
            json.dumps(
                {k: v for k, v in batch.items() if k != "rollups"} | ({"rollups": 1} if v1 else {})
            )
        )
        for table in old.glob(f"table={TOPIC_TOTALS if v1 else 'rollup_*'}"):
            for written in table.glob(f"date=*/batch={batch['batch']}"):
                shutil.rmtree(written)
    now = run_report(spark, AuditSource(lake=built.lake), str(built.root / "v2-report"))
    then = run_report(spark, AuditSource(lake=str(old)), str(built.root / "mixed-report"))
    skip = {"outputs", "warnings"}
    (warning,) = then["warnings"]
    assert warning.startswith("1 batch") and "before rollups were kept" in warning
    assert {k: v for k, v in then.items() if k not in skip} == {
        k: v for k, v in now.items() if k not in skip
    }


def test_a_lake_without_rollups_reports_the_same(spark: SparkSession, built: Lake) -> None:
    old = built.root / "old-lake"
    shutil.copytree(built.lake, old)
    for table in old.glob("table=rollup_*"):
        shutil.rmtree(table)
    for manifest in (old / "_manifest").glob("*.json"):
        batch = json.loads(manifest.read_text())
        manifest.write_text(json.dumps({k: v for k, v in batch.items() if k != "rollups"}))
    now = run_report(spark, AuditSource(lake=built.lake), str(built.root / "new-report"))
    then = run_report(spark, AuditSource(lake=str(old)), str(built.root / "old-report"))
    (warning,) = then.pop("warnings")
    assert "were ingested before rollups were kept" in warning and warning.startswith("4 batch")
    now.pop("warnings")
    skip = {"outputs"}
    assert {k: v for k, v in then.items() if k not in skip} == {
        k: v for k, v in now.items() if k not in skip
    }


def test_the_report_stages_bench_times_each_stage(spark: SparkSession, built: Lake) -> None:
    # bench/report_stages.py, whose figures docs/benchmarks.md quotes, on this lake.
    stages = report_stages(spark, built.lake, str(built.root / "stages"))
    rollup_stages = {f"_collect:{name}" for name in (HOURS, TOPICS, WAIVERS, BUDGETS, LINES)}
    assert set(stages) == {"_frames", "report_facts", "report_page", "report"} | rollup_stages
    # Counted per process: a Python worker of an earlier test reaped meanwhile (its time
    # reaching no parent) must not make a stage's CPU negative.
    assert all(cpu >= 0 for _, cpu in stages.values()), stages
    assert stages["report"][1] > 0, stages
    assert (built.root / "stages" / "summary.json").is_file()
