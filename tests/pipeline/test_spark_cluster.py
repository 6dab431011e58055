"""The report job on a real multi-process Spark cluster gives what it gives on local[2].

`local-cluster[2,1,1024]` is Spark's own standalone cluster in miniature: a master, two
workers and one executor JVM per worker, each with its own Python workers, from pyspark's
own jars. The job runs through the command line, as an operator runs it; Spark's event log
shows that both executors ran its tasks.
"""

from __future__ import annotations

import json
from pathlib import Path

from pyspark.sql import SparkSession

from pipeline.report import SMALL_TABLES, run_report
from policy.loader import load_policy
from tests.pipeline.audit_data import bad_lines, example_cluster, generate_events, write_events
from tests.pipeline.commands import pipeline_cli

REPO = Path(__file__).resolve().parents[2]
TABLES = ("decisions", "violations", *SMALL_TABLES)


def test_report_on_a_multi_process_cluster_equals_local(
    spark: SparkSession, tmp_path: Path
) -> None:
    policy = load_policy((REPO / "examples" / "policy.yaml").read_text(), "policy.yaml")
    events = list(generate_events(policy, example_cluster(), 800, seed=5))
    logs = tmp_path / "logs"
    logs.mkdir()
    for i in range(4):  # rotated logs: one task each, spread over the executors
        write_events(logs / f"audit.jsonl.{i}", events[200 * i : 200 * (i + 1)])
    with (logs / "audit.jsonl.0").open("a", encoding="utf-8") as log:
        log.write("".join(line + "\n" for line, _, _ in bad_lines(events)))
    event_log = tmp_path / "events"
    event_log.mkdir()
    done = pipeline_cli(
        "report",
        "--audit",
        str(logs),
        "--out",
        str(tmp_path / "cluster"),
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
    assert done.returncode == 0, done.stderr[-3000:]
    on_cluster = json.loads(done.stdout)
    local = run_report(spark, [str(logs)], str(tmp_path / "local"))
    assert on_cluster["events"] == len(events)
    assert on_cluster["lines"]["malformed"] > 0
    skip = {"outputs"}
    assert {k: v for k, v in on_cluster.items() if k not in skip} == {
        k: v for k, v in local.items() if k not in skip
    }
    for name in TABLES:
        left = spark.read.parquet(str(tmp_path / "cluster" / name))
        right = spark.read.parquet(str(tmp_path / "local" / name))
        assert left.count() == right.count(), name
        assert left.exceptAll(right).count() == right.exceptAll(left).count() == 0, name
    # Two executor processes, and both ran tasks of the job.
    (log_file,) = event_log.iterdir()
    records = [json.loads(line) for line in log_file.read_text().splitlines()]
    added = {r["Executor ID"] for r in records if r["Event"] == "SparkListenerExecutorAdded"}
    ran = {
        r["Task Info"]["Executor ID"]
        for r in records
        if r["Event"] == "SparkListenerTaskEnd" and r["Task End Reason"]["Reason"] == "Success"
    }
    assert len(added) >= 2
    assert len(ran) == 2
