"""The audit lake: incremental ingest, a quarantine for bad lines, and every job counting alike."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

import kafka_policy_proxy.pipeline.sources.lake as lake_module
from harness.audit_data import bad_lines, example_cluster, generate_events, write_events
from kafka_policy_proxy.pipeline.jobs.replay import run_replay
from kafka_policy_proxy.pipeline.jobs.report import run_report
from kafka_policy_proxy.pipeline.sources.audit_events import UNREADABLE
from kafka_policy_proxy.pipeline.sources.audit_source import AuditSource
from kafka_policy_proxy.pipeline.sources.lake import IngestConflict, committed, ingest, read_lake
from kafka_policy_proxy.pipeline.sources.lake_rollups import ROLLUPS, TOPIC_TOTALS, WAIVERS
from kafka_policy_proxy.policy.loader import load_policy

REPO = Path(__file__).resolve().parents[4]
POLICY = REPO / "examples" / "policy.yaml"
EXAMPLE = load_policy(POLICY.read_text(), "policy.yaml")


@pytest.fixture(scope="module")
def events() -> list[dict[str, Any]]:
    return list(generate_events(EXAMPLE, example_cluster(), 600, seed=3))


def unreadable(events: list[dict[str, Any]]) -> list[tuple[bytes, str]]:
    """Lines that failed the job before: bytes that are not UTF-8, and a good event with a
    field given twice, the first not of its type (Spark's reader fails on it)."""
    twice = '{"validate_only": "nope", ' + json.dumps(events[0])[1:]
    return [
        (b'{"schema": 2, "principal": "User:\xff"}', "not valid UTF-8"),
        (b"\xc3\x28", "not valid UTF-8"),
        (twice.encode(), UNREADABLE),
    ]


def write_logs(directory: Path, events: list[dict[str, Any]]) -> Path:
    """Two rotated logs and the third with every fault class between good events, then
    the `unreadable` lines."""
    directory.mkdir()
    write_events(directory / "audit.jsonl.2", events[:200])
    write_events(directory / "audit.jsonl.1", events[200:400])
    good = [json.dumps(e) for e in events[400:]]
    faults = [line for line, _, _ in bad_lines(events)]
    mixed = [*good[:100], *faults, *good[100:]]
    text = ("\n".join(mixed) + "\n").encode()
    tail = b"".join(line + b"\n" for line, _ in unreadable(events))
    (directory / "audit.jsonl").write_bytes(text + tail)
    return directory


@pytest.fixture
def logs(tmp_path: Path, events: list[dict[str, Any]]) -> Path:
    return write_logs(tmp_path / "logs", events)


@dataclass(frozen=True)
class Jobs:
    """One ingest of the logs, then report and replay from the raw logs and from the lake."""

    root: Path
    logs: Path
    lake: str
    summaries: dict[str, dict[str, Any]]


@pytest.fixture(scope="module")
def jobs(
    spark: SparkSession, events: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> Jobs:
    root = tmp_path_factory.mktemp("jobs")
    logs = write_logs(root / "logs", events)
    lake = str(root / "lake")
    summaries = {"ingest": ingest(spark, [str(logs)], lake)}
    sources = (("raw", AuditSource(paths=[str(logs)])), ("from-lake", AuditSource(lake=lake)))
    for name, source in sources:
        summaries[f"report {name}"] = run_report(
            spark, source, str(root / name / "report"), drill_down=True
        )
        summaries[f"replay {name}"] = run_replay(
            spark, str(POLICY), source, str(root / name / "replay")
        )
    return Jobs(root, logs, lake, summaries)


def expected_lines(events: list[dict[str, Any]]) -> dict[str, Any]:
    faults = [*bad_lines(events), *(("", "malformed", r) for _, r in unreadable(events))]
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
        "unknown_versions": {"0": 1, "4": 1},
    }


def test_every_job_counts_every_fault_class_alike(jobs: Jobs, events: list[dict[str, Any]]) -> None:
    expected = expected_lines(events)
    (bad_file,) = jobs.summaries["ingest"]["lines"]["bad_by_file"]
    assert bad_file.endswith("/audit.jsonl")
    for job, summary in jobs.summaries.items():
        lines = summary["lines"]
        assert {k: v for k, v in lines.items() if k != "bad_by_file"} == expected, job
        assert lines["bad_by_file"] == {bad_file: expected["total"] - len(events)}, job
        if job.startswith("report"):
            assert summary["events"] == len(events)
        if job.startswith("replay"):
            assert summary["requests"] == len(events)


def test_the_quarantine_keeps_file_line_reason_and_sample(
    spark: SparkSession, jobs: Jobs, events: list[dict[str, Any]]
) -> None:
    rows = read_lake(spark, jobs.lake).quarantine.orderBy("line").collect()
    faults = bad_lines(events)
    after = 200 + len(faults)  # the file's lines before the unreadable ones
    assert [(r["line"], r["kind"], r["problem"]) for r in rows] == [
        (101 + i, kind, reason) for i, (_, kind, reason) in enumerate(faults)
    ] + [(after + 1 + i, "malformed", reason) for i, (_, reason) in enumerate(unreadable(events))]
    assert all(r["source"].endswith("/audit.jsonl") for r in rows)
    assert all(len(r["sample"].encode()) <= 200 for r in rows)
    assert rows[2]["sample"] == "not json"
    shown = ['{"schema": 2, "principal": "User:\\xff"}', "\\xc3("]  # escaped, not dropped
    assert [r["sample"] for r in rows[-3:-1]] == shown
    assert rows[-1]["sample"] == unreadable(events)[-1][0][:200].decode()
    # On disk: the two tables, events by the UTC date of their time.
    lake = Path(jobs.lake)
    tables = {p.name for p in lake.iterdir() if p.name.startswith("table=")}
    # The rollups beside them (none of waivers: no exception waived anything here).
    assert tables == {"table=events", "table=quarantine"} | {
        f"table={t}" for t in (*ROLLUPS, TOPIC_TOTALS) if t != WAIVERS
    }
    dates = {p.name for p in (lake / "table=events").iterdir()}
    assert dates == {f"date={e['time'][:10]}" for e in events}


def test_report_and_replay_from_the_lake_equal_those_from_the_raw_logs(
    spark: SparkSession, jobs: Jobs
) -> None:
    tables = {
        "report": ("decisions", "violations", "top_denied_principals", "top_denied_rules"),
        "replay": ("decisions", "flips", "bad_lines"),
    }
    for job, names in tables.items():
        for name in names:
            left = spark.read.parquet(str(jobs.root / "raw" / job / name))
            right = spark.read.parquet(str(jobs.root / "from-lake" / job / name))
            assert left.count() == right.count(), name
            assert left.exceptAll(right).count() == right.exceptAll(left).count() == 0, name
        raw, lake = jobs.summaries[f"{job} raw"], jobs.summaries[f"{job} from-lake"]
        skip = {"outputs"}
        assert {k: v for k, v in raw.items() if k not in skip} == {
            k: v for k, v in lake.items() if k not in skip
        }


def test_ingest_is_incremental_and_survives_rotation(
    spark: SparkSession, logs: Path, events: list[dict[str, Any]], tmp_path: Path
) -> None:
    lake = str(tmp_path / "lake")
    first = ingest(spark, [str(logs)], lake)
    assert first["files"] == {"ingested": 3, "known_log": 0, "already_ingested": 0, "skipped": 0}
    again = ingest(spark, [str(logs)], lake)
    assert again["files"] == {"ingested": 0, "known_log": 0, "already_ingested": 3, "skipped": 0}
    assert again["batch"] is None
    # The proxy rotates: every log moves up one name (size and mtime kept), and a new one starts.
    for old, new in (("audit.jsonl.2", "audit.jsonl.3"), ("audit.jsonl.1", "audit.jsonl.2")):
        os.rename(logs / old, logs / new)
    os.rename(logs / "audit.jsonl", logs / "audit.jsonl.1")
    more = list(generate_events(EXAMPLE, example_cluster(), 50, seed=9))
    write_events(logs / "audit.jsonl", more)
    rotated = ingest(spark, [str(logs)], lake)
    assert rotated["files"] == {"ingested": 1, "known_log": 0, "already_ingested": 3, "skipped": 0}
    assert rotated["lines"]["events"] == 50
    assert read_lake(spark, lake).events.count() == len(events) + 50
    assert len(committed(spark, lake)) == 2


def ids_in(spark: SparkSession, lake: str) -> Counter[str]:
    """How often each decision id is in the lake's events."""
    rows = read_lake(spark, lake, with_request=False).events.select("decision_id").collect()
    return Counter(r["decision_id"] for r in rows)


def append(path: Path, data: bytes) -> None:
    with path.open("ab") as log:
        log.write(data)


def live_log(tmp_path: Path, events: list[dict[str, Any]]) -> tuple[Path, str, Path]:
    """A log directory whose live log has `events`, and a lake path: (logs, lake, live log)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    write_events(logs / "audit.jsonl", events)
    return logs, str(tmp_path / "lake"), logs / "audit.jsonl"


def compress(plain: Path, packed: Path) -> None:
    """Gzip `plain` to `packed`, as logrotate's compress does."""
    with plain.open("rb") as source, gzip.open(packed, "wb") as target:
        shutil.copyfileobj(source, target)


def test_a_live_log_is_taken_once_as_it_grows_is_rotated_and_compressed(
    spark: SparkSession, events: list[dict[str, Any]], tmp_path: Path
) -> None:
    logs, lake, live = live_log(tmp_path, events[:100])
    first = ingest(spark, [str(logs)], lake)
    assert first["lines"]["events"] == 100
    # Written to since: only the new lines are taken, with their line numbers in the file.
    append(live, b"".join(json.dumps(e).encode() + b"\n" for e in events[100:150]) + b"{cut\n")
    grown = ingest(spark, [str(logs)], lake)
    assert grown["files"] == {"ingested": 0, "known_log": 1, "already_ingested": 0, "skipped": 0}
    assert (grown["lines"]["events"], grown["lines"]["malformed"]) == (50, 1)
    taken = read_lake(spark, lake).lines.where("problem IS NULL AND line > 100")
    numbers = taken.select("line").collect()
    assert sorted(r["line"] for r in numbers) == list(range(101, 151))
    # Rotated (renamed), then compressed as logrotate does, while a new log starts.
    os.rename(live, logs / "audit.jsonl.1")
    write_events(live, events[150:160])
    rotated = ingest(spark, [str(logs)], lake)
    assert rotated["files"] == {"ingested": 1, "known_log": 0, "already_ingested": 1, "skipped": 0}
    compress(logs / "audit.jsonl.1", logs / "audit.jsonl.1.gz")
    (logs / "audit.jsonl.1").unlink()
    packed = ingest(spark, [str(logs)], lake)
    assert packed["files"] == {"ingested": 0, "known_log": 1, "already_ingested": 1, "skipped": 0}
    assert packed["lines"]["total"] == 0
    # Known by size and mtime from now on: not read again.
    again = ingest(spark, [str(logs)], lake)
    assert again["files"] == {"ingested": 0, "known_log": 0, "already_ingested": 2, "skipped": 0}
    assert again["batch"] is None
    assert ids_in(spark, lake) == Counter(e["decision_id"] for e in events[:160])
    bad = read_lake(spark, lake).quarantine.select("sample").collect()
    assert [r["sample"] for r in bad] == ["{cut"]


def test_a_line_being_written_is_left_for_a_later_ingest(
    spark: SparkSession, events: list[dict[str, Any]], tmp_path: Path
) -> None:
    logs, lake, live = live_log(tmp_path, events[:10])
    line = json.dumps(events[10]).encode()
    append(live, line[:40])
    first = ingest(spark, [str(logs)], lake)
    assert (first["lines"]["events"], first["lines"]["malformed"]) == (10, 0)
    (warning,) = first["warnings"]
    assert "audit.jsonl: its last line (11) has no newline yet" in warning
    append(live, line[40:] + b"\n" + json.dumps(events[11]).encode() + b"\n")
    second = ingest(spark, [str(logs)], lake)
    assert (second["lines"]["events"], second["lines"]["malformed"]) == (2, 0)
    assert second["warnings"] == []
    # A log cut short mid-line for good: said on every ingest, and counted once compressed.
    append(live, line[:40])
    assert ingest(spark, [str(logs)], lake)["lines"]["total"] == 0
    stuck = ingest(spark, [str(logs)], lake)
    assert stuck["batch"] is None
    assert "its last line (13) has no newline and was not ingested" in stuck["warnings"][0]
    compress(live, logs / "audit.jsonl.1.gz")
    live.unlink()
    packed = ingest(spark, [str(logs)], lake)
    assert (packed["lines"]["events"], packed["lines"]["malformed"]) == (0, 1)
    assert ids_in(spark, lake) == Counter(e["decision_id"] for e in events[:12])


def test_two_copies_of_a_log_in_one_run_are_taken_once(
    spark: SparkSession, logs: Path, events: list[dict[str, Any]], tmp_path: Path
) -> None:
    lake = str(tmp_path / "lake")
    copy = tmp_path / "archive" / "audit.jsonl.2.gz"
    copy.parent.mkdir()
    compress(logs / "audit.jsonl.2", copy)
    first = ingest(spark, [str(tmp_path / "archive"), str(logs)], lake)
    assert first["files"] == {"ingested": 3, "known_log": 0, "already_ingested": 0, "skipped": 1}
    (warning,) = first["warnings"]
    assert "audit.jsonl.2 starts with the same line as" in warning
    second = ingest(spark, [str(tmp_path / "archive"), str(logs)], lake)
    assert second["files"] == {"ingested": 0, "known_log": 1, "already_ingested": 3, "skipped": 0}
    assert second["lines"]["total"] == 0
    assert ids_in(spark, lake) == Counter(e["decision_id"] for e in events)


def test_a_decision_already_in_the_lake_is_not_added_again(
    spark: SparkSession, events: list[dict[str, Any]], tmp_path: Path
) -> None:
    logs, lake, _ = live_log(tmp_path, events[:100])
    ingest(spark, [str(logs)], lake)
    # The same decisions from elsewhere, which the first-line match cannot tie to the log
    # (what the audit topic held, re-assembled by hand): 60-99 again, 100-119 new, 105 twice.
    other = tmp_path / "from-the-topic"
    other.mkdir()
    write_events(other / "audit.jsonl", [*events[60:110], events[105], *events[110:120]])
    more = ingest(spark, [str(other)], lake)
    assert more["files"]["ingested"] == 1
    assert more["lines"]["events"] == 20
    assert more["repeated_events"] == 41
    assert "41 event(s) were already in the lake (the same decision_id)" in more["warnings"][0]
    assert more["batch"].endswith("-once")
    [manifest] = [b for b in committed(spark, lake) if b["batch"] == more["batch"]]
    assert manifest["files"][0]["repeated"] == 41
    # The copy of 105 that stays is the first line of it; the batch first written is gone.
    lines = read_lake(spark, lake).lines
    kept = lines.where(lines.decision_id == events[105]["decision_id"]).collect()
    assert [(r["source"].rsplit("/", 2)[-2], r["line"]) for r in kept] == [("from-the-topic", 46)]
    batches = {p.name for p in (tmp_path / "lake").glob("table=*/date=*/batch=*")}
    assert {b.removeprefix("batch=") for b in batches} == {
        b["batch"] for b in committed(spark, lake)
    }
    assert ids_in(spark, lake) == Counter(e["decision_id"] for e in events[:120])


def test_of_two_ingests_at_once_the_second_to_finish_discards_its_batch(
    spark: SparkSession,
    logs: Path,
    events: list[dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lake = str(tmp_path / "lake")
    write = lake_module.write_batch
    rival: dict[str, Any] = {}

    def write_then_race(*args: Any) -> Any:
        counts = write(*args)
        if "batch" not in rival:  # once: a second ingest runs, whole, before the first commits
            rival["batch"] = None
            rival.update(ingest(spark, [str(logs)], lake))
        return counts

    monkeypatch.setattr(lake_module, "write_batch", write_then_race)
    with pytest.raises(IngestConflict) as conflict:
        ingest(spark, [str(logs)], lake)
    assert f"another ingest committed {rival['batch']} from the same files" in str(conflict.value)
    assert [b["batch"] for b in committed(spark, lake)] == [rival["batch"]]
    batches = {p.name for p in (tmp_path / "lake").glob("table=*/date=*/batch=*")}
    assert batches == {f"batch={rival['batch']}"}  # the discarded batch's files are gone
    assert ids_in(spark, lake) == Counter(e["decision_id"] for e in events)


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


def test_an_empty_lake_is_refused_naming_ingest(spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="pipeline ingest"):
        read_lake(spark, str(tmp_path / "nothing"))
    shutil.rmtree(tmp_path, ignore_errors=True)
