"""The jobs as operators run them: the kafka-policy-proxy command and spark-submit."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from pyspark.sql import SparkSession

from pipeline.lake import AuditSource
from tests.pipeline.commands import BIN, pipeline_cli

REPO = Path(__file__).resolve().parents[2]
POLICY = """\
version: 1
rules:
  - name: partition-count
    partitions: {min: 3}
"""


def _snapshot(path: Path, topics: dict[str, int], *, complete: bool = True) -> Path:
    lines: list[dict[str, object]] = [
        {"kind": "cluster", "schema": 1, "cluster_id": "c1", "brokers": [{"id": 1}], "defaults": {}}
    ]
    for name, partitions in sorted(topics.items()):
        lines.append(
            {
                "kind": "topic",
                "cluster_id": "c1",
                "name": name,
                "topic_id": f"id-{name}",
                "partitions": partitions,
                "replication_factor": 1,
                "assignment": [[p, [1]] for p in range(partitions)],
                "configs": {},
                "config_sources": {},
                "internal": False,
                "marked_for_deletion": False,
            }
        )
    if complete:
        lines.append({"kind": "end", "cluster_id": "c1", "topics": len(topics)})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_spark_submit_runs_a_job_with_its_own_master(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    snapshot = _snapshot(tmp_path / "s.jsonl", {"wide": 6, "narrow": 1})
    out = tmp_path / "out"
    done = subprocess.run(
        [
            str(BIN / "spark-submit"),
            "--master",
            "local[1]",
            str(REPO / "pipeline" / "__main__.py"),
            "scan",
            "--policy",
            str(policy),
            "--snapshot",
            str(snapshot),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        # As in an activated virtualenv: spark-submit finds Spark and Python through PATH.
        env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "PYSPARK_PYTHON": "python"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary == json.loads((out / "summary.json").read_text())
    assert summary["violating"] == 1
    assert (out / "scan.html").exists()


def test_a_bad_snapshot_is_one_clear_line_and_exit_2(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    snapshot = _snapshot(tmp_path / "s.jsonl", {"wide": 6}, complete=False)
    done = pipeline_cli(
        "scan",
        "--policy",
        str(policy),
        "--snapshot",
        str(snapshot),
        "--out",
        str(tmp_path / "out"),
        "--master",
        "local[1]",
    )
    assert done.returncode == 2
    assert done.stdout == ""
    errors = [line for line in done.stderr.splitlines() if line.startswith("kafka-policy-proxy:")]
    assert len(errors) == 1
    assert "no end line" in errors[0]
    assert "Traceback" not in done.stderr


def test_ingest_on_the_command_line_counts_as_report_does(
    spark: SparkSession, tmp_path: Path
) -> None:
    from pipeline.report import run_report
    from policy.loader import load_policy
    from tests.pipeline.audit_data import example_cluster, generate_events, write_events

    policy = load_policy((REPO / "examples" / "policy.yaml").read_text(), "policy.yaml")
    (tmp_path / "logs").mkdir()
    write_events(tmp_path / "logs" / "audit.jsonl", generate_events(policy, example_cluster(), 50))
    with (tmp_path / "logs" / "audit.jsonl").open("a") as log:
        log.write("\n{not json\n")
    lake = tmp_path / "lake"
    done = pipeline_cli(
        "ingest", "--audit", str(tmp_path / "logs"), "--lake", str(lake), "--master", "local[1]"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ingested = json.loads(done.stdout)
    assert ingested["files"] == {"ingested": 1, "known_log": 0, "already_ingested": 0, "skipped": 0}
    assert (ingested["lines"]["events"], ingested["lines"]["blank"]) == (50, 1)
    assert ingested["lines"]["malformed_by_problem"] == {"not valid JSON": 1}
    report = run_report(spark, AuditSource(lake=str(lake)), str(tmp_path / "out"))
    assert report["lines"] == ingested["lines"]


def test_a_topic_ingest_without_its_cluster_or_with_a_bad_setting_is_refused(
    tmp_path: Path,
) -> None:
    lake = str(tmp_path / "lake")
    done = pipeline_cli("ingest", "--topic", "audit", "--lake", lake)
    assert done.returncode == 2
    assert "ingest --topic needs --bootstrap-server" in done.stderr
    done = pipeline_cli(
        "ingest", "--topic", "audit", "--bootstrap-server", "k:9092", "--lake", lake,
        "--kafka-option", "security.protocol=SSL", "--kafka-option", "sasl.mechanism",
    )  # fmt: skip
    assert done.returncode == 2
    assert "--kafka-option 'sasl.mechanism': expected KEY=VALUE" in done.stderr
    assert not (tmp_path / "lake").exists()
