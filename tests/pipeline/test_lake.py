"""The audit lake: incremental ingest, a quarantine for bad lines, and every job counting alike."""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from pipeline.lake import AuditSource, committed, ingest, read_lake
from pipeline.replay import run_replay
from pipeline.report import run_report
from policy.loader import load_policy
from tests.pipeline.audit_data import bad_lines, example_cluster, generate_events, write_events

REPO = Path(__file__).resolve().parents[2]
POLICY = REPO / "examples" / "policy.yaml"
EXAMPLE = load_policy(POLICY.read_text(), "policy.yaml")


@pytest.fixture(scope="module")
def events() -> list[dict[str, Any]]:
    return list(generate_events(EXAMPLE, example_cluster(), 600, seed=3))


@pytest.fixture
def logs(tmp_path: Path, events: list[dict[str, Any]]) -> Path:
    """Two rotated logs and the third with every fault class between good events."""
    directory = tmp_path / "logs"
    directory.mkdir()
    write_events(directory / "audit.jsonl.2", events[:200])
    write_events(directory / "audit.jsonl.1", events[200:400])
    good = [json.dumps(e) for e in events[400:]]
    faults = [line for line, _, _ in bad_lines(events)]
    mixed = [*good[:100], *faults, *good[100:]]
    (directory / "audit.jsonl").write_text("\n".join(mixed) + "\n", encoding="utf-8")
    return directory


def expected_lines(events: list[dict[str, Any]]) -> dict[str, Any]:
    faults = bad_lines(events)
    kinds = Counter(kind for _, kind, _ in faults)
    return {
        "total": len(events) + len(faults),
        "events": len(events),
        "blank": kinds["blank"],
        "malformed": kinds["malformed"],
        "unknown_version": kinds["unknown_version"],
        "malformed_by_problem": dict(
            sorted(Counter(r for _, k, r in faults if k == "malformed").items())
        ),
        "unknown_versions": {"0": 1, "3": 1},
    }


def test_every_job_counts_every_fault_class_alike(
    spark: SparkSession, logs: Path, events: list[dict[str, Any]], tmp_path: Path
) -> None:
    lake = str(tmp_path / "lake")
    ingested = ingest(spark, [str(logs)], lake)
    expected = expected_lines(events)
    (bad_file,) = ingested["lines"]["bad_by_file"]
    assert bad_file.endswith("/audit.jsonl")
    counts = {"ingest": ingested["lines"]}
    sources = (("raw", AuditSource(paths=[str(logs)])), ("from-lake", AuditSource(lake=lake)))
    for name, source in sources:
        report = run_report(spark, source, str(tmp_path / name / "report"))
        replay = run_replay(spark, str(POLICY), source, str(tmp_path / name / "replay"))
        counts[f"report {name}"] = report["lines"]
        counts[f"replay {name}"] = replay["lines"]
        assert report["events"] == replay["requests"] == len(events)
    for job, lines in counts.items():
        assert {k: v for k, v in lines.items() if k != "bad_by_file"} == expected, job
        assert lines["bad_by_file"] == {bad_file: expected["total"] - len(events)}, job


def test_the_quarantine_keeps_file_line_reason_and_sample(
    spark: SparkSession, logs: Path, events: list[dict[str, Any]], tmp_path: Path
) -> None:
    lake = str(tmp_path / "lake")
    ingest(spark, [str(logs)], lake)
    rows = read_lake(spark, lake).quarantine.orderBy("line").collect()
    faults = bad_lines(events)
    assert [(r["line"], r["kind"], r["problem"]) for r in rows] == [
        (101 + i, kind, reason) for i, (_, kind, reason) in enumerate(faults)
    ]
    assert all(len(r["sample"].encode()) <= 200 for r in rows)
    assert rows[2]["sample"] == "not json"
    # On disk: the two tables, events by the UTC date of their time.
    tables = {p.name for p in (tmp_path / "lake").iterdir() if p.name.startswith("table=")}
    assert tables == {"table=events", "table=quarantine"}
    dates = {p.name for p in (tmp_path / "lake" / "table=events").iterdir()}
    assert dates == {f"date={e['time'][:10]}" for e in events}


def test_ingest_is_incremental_and_survives_rotation(
    spark: SparkSession, logs: Path, events: list[dict[str, Any]], tmp_path: Path
) -> None:
    lake = str(tmp_path / "lake")
    first = ingest(spark, [str(logs)], lake)
    assert first["files"] == {"ingested": 3, "already_ingested": 0, "changed": 0}
    again = ingest(spark, [str(logs)], lake)
    assert again["files"] == {"ingested": 0, "already_ingested": 3, "changed": 0}
    assert again["batch"] is None
    # The proxy rotates: every log moves up one name (size and mtime kept), and a new one starts.
    for old, new in (("audit.jsonl.2", "audit.jsonl.3"), ("audit.jsonl.1", "audit.jsonl.2")):
        os.rename(logs / old, logs / new)
    os.rename(logs / "audit.jsonl", logs / "audit.jsonl.1")
    more = list(generate_events(EXAMPLE, example_cluster(), 50, seed=9))
    write_events(logs / "audit.jsonl", more)
    rotated = ingest(spark, [str(logs)], lake)
    assert rotated["files"] == {"ingested": 1, "already_ingested": 3, "changed": 0}
    assert rotated["lines"]["events"] == 50
    assert read_lake(spark, lake).events.count() == len(events) + 50
    assert len(committed(spark, lake)) == 2


def test_a_changed_file_is_never_ingested_twice(
    spark: SparkSession, logs: Path, events: list[dict[str, Any]], tmp_path: Path
) -> None:
    lake = str(tmp_path / "lake")
    ingest(spark, [str(logs)], lake)
    with (logs / "audit.jsonl").open("a", encoding="utf-8") as log:
        log.write(json.dumps(events[0]) + "\n")
    result = ingest(spark, [str(logs)], lake)
    assert result["files"] == {"ingested": 0, "already_ingested": 2, "changed": 1}
    (warning,) = result["warnings"]
    assert "audit.jsonl changed since it was ingested" in warning
    assert read_lake(spark, lake).events.count() == len(events)


def test_a_batch_without_its_manifest_is_never_read(
    spark: SparkSession, logs: Path, events: list[dict[str, Any]], tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    first = ingest(spark, [str(logs / "audit.jsonl.2")], str(lake))
    second = ingest(spark, [str(logs / "audit.jsonl.1")], str(lake))
    # A run that died before its commit: its data is there, its manifest is not.
    (lake / "_manifest" / f"{second['batch']}.json").unlink()
    assert read_lake(spark, str(lake)).events.count() == 200
    # The next run ingests that file again, once.
    retried = ingest(spark, [str(logs / "audit.jsonl.1")], str(lake))
    assert retried["files"]["ingested"] == 1
    assert read_lake(spark, str(lake)).events.count() == 400
    assert [b["batch"] for b in committed(spark, str(lake))] == [first["batch"], retried["batch"]]


def test_report_from_the_lake_equals_report_from_the_raw_logs(
    spark: SparkSession, logs: Path, tmp_path: Path
) -> None:
    lake = str(tmp_path / "lake")
    ingest(spark, [str(logs)], lake)
    raw = run_report(spark, [str(logs)], str(tmp_path / "raw"))
    lake_report = run_report(spark, AuditSource(lake=lake), str(tmp_path / "from-lake"))
    for name in ("decisions", "violations", "top_denied_principals", "top_denied_rules"):
        left = spark.read.parquet(str(tmp_path / "raw" / name))
        right = spark.read.parquet(str(tmp_path / "from-lake" / name))
        assert left.exceptAll(right).count() == right.exceptAll(left).count() == 0, name
    drop = ("outputs",)
    assert {k: v for k, v in raw.items() if k not in drop} == {
        k: v for k, v in lake_report.items() if k not in drop
    }


def test_an_empty_lake_is_refused_naming_ingest(spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="pipeline ingest"):
        read_lake(spark, str(tmp_path / "nothing"))
    shutil.rmtree(tmp_path, ignore_errors=True)
