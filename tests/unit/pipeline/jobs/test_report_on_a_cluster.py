"""The report job on a real multi-process Spark cluster gives what it gives on local[2].

`local-cluster[2,1,1024]` is Spark's own standalone cluster in miniature: a master, two
workers and one executor JVM per worker, each with its own Python workers, from pyspark's
own jars. The job runs once, through the command line, as an operator runs it (and on
local[2] meanwhile); each test checks one thing of that run. Spark's event log shows that
both executors ran its tasks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from harness.audit_data import bad_lines, example_cluster, generate_events, write_events
from kafka_policy_proxy.pipeline.jobs.report import SMALL_TABLES, run_report
from kafka_policy_proxy.policy.loader import load_policy
from tests.unit.pipeline.commands import start_pipeline_cli

REPO = Path(__file__).resolve().parents[4]
TABLES = ("decisions", "violations", *SMALL_TABLES)


@dataclass(frozen=True)
class Runs:
    """The same report on the cluster and on local[2]: their outputs and summaries."""

    root: Path
    events: int
    on_cluster: dict[str, Any]
    local: dict[str, Any]
    event_log: list[dict[str, Any]]


@pytest.fixture(scope="module")
def runs(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Runs:
    root = tmp_path_factory.mktemp("cluster")
    policy = load_policy((REPO / "examples" / "policy.yaml").read_text(), "policy.yaml")
    events = list(generate_events(policy, example_cluster(), 800, seed=5))
    logs = root / "logs"
    logs.mkdir()
    for i in range(4):  # rotated logs: one task each, spread over the executors
        write_events(logs / f"audit.jsonl.{i}", events[200 * i : 200 * (i + 1)])
    with (logs / "audit.jsonl.0").open("a", encoding="utf-8") as log:
        log.write("".join(line + "\n" for line, _, _ in bad_lines(events)))
    event_log = root / "events"
    event_log.mkdir()
    started = start_pipeline_cli(
        "report",
        "--drill-down",
        "--audit",
        str(logs),
        "--out",
        str(root / "cluster"),
        "--master",
        "local-cluster[2,1,1024]",
        "--conf",
        "spark.eventLog.enabled=true",
        "--conf",
        f"spark.eventLog.dir={event_log.as_uri()}",
        "--conf",
        "spark.eventLog.rolling.enabled=false",
        "--conf",
        "spark.eventLog.compress=false",
        timeout=600,
    )
    try:
        # The same report on local[2], while the cluster starts.
        local = run_report(spark, [str(logs)], str(root / "local"), drill_down=True)
        done = started.done()
    finally:
        started.stop()
    assert done.returncode == 0, done.stderr[-3000:]
    (log_file,) = event_log.iterdir()
    records = [json.loads(line) for line in log_file.read_text().splitlines()]
    return Runs(root, len(events), json.loads(done.stdout), local, records)


def test_the_summary_equals_that_of_local(runs: Runs) -> None:
    assert runs.on_cluster["events"] == runs.events
    assert runs.on_cluster["lines"]["malformed"] > 0, runs.on_cluster["lines"]
    skip = {"outputs"}
    assert {k: v for k, v in runs.on_cluster.items() if k not in skip} == {
        k: v for k, v in runs.local.items() if k not in skip
    }


@pytest.mark.parametrize("name", TABLES)
def test_every_table_equals_that_of_local(spark: SparkSession, runs: Runs, name: str) -> None:
    left = spark.read.parquet(str(runs.root / "cluster" / name))
    right = spark.read.parquet(str(runs.root / "local" / name))
    assert left.count() == right.count()
    assert left.exceptAll(right).count() == right.exceptAll(left).count() == 0


def test_two_executor_processes_both_ran_tasks_of_the_job(runs: Runs) -> None:
    added = {r["Executor ID"] for r in runs.event_log if r["Event"] == "SparkListenerExecutorAdded"}
    ran = {
        r["Task Info"]["Executor ID"]
        for r in runs.event_log
        if r["Event"] == "SparkListenerTaskEnd" and r["Task End Reason"]["Reason"] == "Success"
    }
    assert len(added) >= 2, added
    assert len(ran) == 2, ran
