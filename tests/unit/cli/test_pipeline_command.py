"""The jobs as operators run them: the kafka-policy-proxy command and spark-submit
(cli/spark_submit.py)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from harness.audit_data import example_cluster, generate_events, write_events
from kafka_policy_proxy.cli import build_parser
from kafka_policy_proxy.pipeline.jobs.report import run_report
from kafka_policy_proxy.pipeline.sources.audit_source import AuditSource
from kafka_policy_proxy.policy.loader import load_policy
from tests.unit.pipeline.commands import BIN, pipeline_cli, start, start_pipeline_cli

REPO = Path(__file__).resolve().parents[3]
SPARK_SUBMIT = REPO / "cli" / "spark_submit.py"
POLICY = """\
version: 1
rules:
  - name: partition-count
    partitions: {min: 3}
owners:
  wide-team: {topic_prefixes: [wide]}
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


@dataclass(frozen=True)
class Runs:
    """Three jobs as operators run them, each in a JVM of its own; `root` holds their files."""

    root: Path
    submitted: subprocess.CompletedProcess[str]  # scan through spark-submit
    refused: subprocess.CompletedProcess[str]  # scan of a snapshot with no end line
    ingested: subprocess.CompletedProcess[str]  # ingest of a log with bad lines


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    """The three jobs, started at once: a JVM's start mostly waits on one core."""
    root = tmp_path_factory.mktemp("commands")
    policy = root / "policy.yaml"
    policy.write_text(POLICY)
    complete = _snapshot(root / "complete.jsonl", {"wide": 6, "narrow": 1})
    cut = _snapshot(root / "cut.jsonl", {"wide": 6}, complete=False)
    example = load_policy((REPO / "examples" / "policy.yaml").read_text(), "policy.yaml")
    (root / "logs").mkdir()
    write_events(root / "logs" / "audit.jsonl", generate_events(example, example_cluster(), 50))
    with (root / "logs" / "audit.jsonl").open("a") as log:
        log.write("\n{not json\n")
    submit = [str(BIN / "spark-submit"), "--master", "local[1]", str(SPARK_SUBMIT)]
    scan = ["scan", "--policy", str(policy), "--snapshot"]
    started = {
        "submitted": start(
            [*submit, *scan, str(complete), "--out", str(root / "submitted")],
            # As in an activated virtualenv: spark-submit finds Spark and Python through PATH.
            env={"PATH": f"{BIN}:{os.environ['PATH']}", "PYSPARK_PYTHON": "python"},
        ),
        "refused": start_pipeline_cli(
            *scan, str(cut), "--out", str(root / "refused"), "--master", "local[1]"
        ),
        "ingested": start_pipeline_cli(
            *("ingest", "--audit", str(root / "logs"), "--lake", str(root / "lake")),
            *("--master", "local[1]"),
        ),
    }
    try:
        yield Runs(root, **{name: job.done() for name, job in started.items()})
    finally:
        for job in started.values():
            job.stop()


def test_spark_submit_runs_a_job_with_its_own_master(runs: Runs) -> None:
    done = runs.submitted
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    out = runs.root / "submitted"
    assert summary == json.loads((out / "summary.json").read_text())
    assert summary["violating"] == 1, summary
    assert (out / "scan.html").is_file(), sorted(p.name for p in out.iterdir())
    # The policy has owners: a report per team by default; `narrow` is no team's.
    assert summary["teams"]["wide-team"]["pass"] == 1
    assert summary["teams"]["(unowned)"]["fail"] == 1
    unowned = json.loads((out / "teams" / "_unowned" / "report.json").read_text())
    assert [r["resource"]["name"] for r in unowned["results"]] == ["narrow"]


@pytest.mark.parametrize(
    ("flag", "teams"), [([], None), (["--teams"], True), (["--no-teams"], False)]
)
def test_scan_writes_team_reports_unless_told_not_to(flag: list[str], teams: bool | None) -> None:
    scan = ["pipeline", "scan", "--policy", "p.yaml", "--snapshot", "s.jsonl", "--out", "o"]
    assert build_parser().parse_args([*scan, *flag]).teams is teams


def test_a_bad_snapshot_is_one_clear_line_and_exit_2(runs: Runs) -> None:
    done = runs.refused
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stdout == ""
    errors = [line for line in done.stderr.splitlines() if line.startswith("kafka-policy-proxy:")]
    assert len(errors) == 1, done.stderr[-3000:]
    assert "no end line" in errors[0]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]


def test_ingest_on_the_command_line_counts_as_report_does(spark: SparkSession, runs: Runs) -> None:
    done = runs.ingested
    assert done.returncode == 0, done.stderr[-3000:]
    ingested = json.loads(done.stdout)
    assert ingested["files"] == {"ingested": 1, "known_log": 0, "already_ingested": 0, "skipped": 0}
    assert (ingested["lines"]["events"], ingested["lines"]["blank"]) == (50, 1)
    assert ingested["lines"]["malformed_by_problem"] == {"not valid JSON": 1}
    lake = AuditSource(lake=str(runs.root / "lake"))
    report = run_report(spark, lake, str(runs.root / "report"))
    assert report["lines"] == ingested["lines"]


def test_a_topic_ingest_without_its_cluster_or_with_a_bad_setting_is_refused(
    tmp_path: Path,
) -> None:
    lake = str(tmp_path / "lake")
    done = pipeline_cli("ingest", "--topic", "audit", "--lake", lake)
    assert done.returncode == 2, done.stderr
    assert "ingest --topic needs --bootstrap-server" in done.stderr
    done = pipeline_cli(
        "ingest", "--topic", "audit", "--bootstrap-server", "k:9092", "--lake", lake,
        "--kafka-option", "max.poll.records=5", "--kafka-option", "sasl.mechanism",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "--kafka-option 'sasl.mechanism': expected KEY=VALUE" in done.stderr
    # A secret on the command line is refused: it belongs in the --command-config file.
    done = pipeline_cli(
        "ingest", "--topic", "audit", "--bootstrap-server", "k:9092", "--lake", lake,
        "--kafka-option", "sasl.jaas.config=x required password=secret;",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "--kafka-option sasl.jaas.config: security settings go in the --command-config" in (
        done.stderr
    )
    config = tmp_path / "client.properties"
    config.write_text("security.protocol=SSL\nssl.truststore.location=/etc/t.jks\n")
    done = pipeline_cli(
        "ingest", "--topic", "audit", "--bootstrap-server", "k:9092", "--lake", lake,
        "--command-config", str(config),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"{config}: ssl.truststore.type: JKS (Kafka's default when unset)" in done.stderr
    assert not (tmp_path / "lake").exists(), "a refused ingest wrote the lake"
