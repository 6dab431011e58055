"""The Spark jobs over 10 million audit events on local[2]: wall time, events/s, peak memory.

Run from the repository's root:

    .venv/bin/python -m bench.pipeline_bench [--events 10000000] [--work DIR] [--jobs ...]

The events are written once (100 files, like rotated audit logs) and kept under --work. Each
job runs as the real CLI in a child process; the RSS of its whole process tree (the Python
driver, the Spark JVM and the Python workers) is sampled every 0.2 s. In the same run:

- `floor`: a plain Spark line count of the same files, the cost of reading them;
- `ingest`: the files into a fresh lake (`pipeline ingest`);
- `report`, `replay`: the jobs from the lake (`report-raw`, `replay-raw`: from the JSON);
- `spark-query`, `duckdb-query`: the report's aggregation (events by hour and the report's
  keys) over the lake, in Spark and in DuckDB: the whole process as a user runs it, and the
  query alone (Spark's after one warm-up run in the same session).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.audit_data import example_cluster, write_bulk, write_snapshot
from kafka_policy_proxy.policy.loader import load_policy

ROOT = Path(__file__).resolve().parent.parent

PAGE = os.sysconf("SC_PAGE_SIZE")
FLOOR = """
import sys
from kafka_policy_proxy.pipeline.session import spark_session
spark = spark_session("local[2]")
print(spark.read.text(sys.argv[1]).count())
spark.stop()
"""
# The report's aggregation (`decisions`): events by UTC hour and the report's keys.
KEYS = "principal, topic, action, api, resource_type, resource, decision, mode"
QUERY = f"SELECT date_trunc('hour', time) AS hour, {KEYS}, count(*) AS events FROM events "
QUERY += f"GROUP BY date_trunc('hour', time), {KEYS}"
SPARK_QUERY = f"""
import json, sys, time
from kafka_policy_proxy.pipeline.sources.lake import read_lake
from kafka_policy_proxy.pipeline.session import spark_session
spark = spark_session("local[2]")
read_lake(spark, sys.argv[1], with_request=False).events.createOrReplaceTempView("events")
times = []
for _ in range(2):  # the first warms the JVM up
    started = time.perf_counter()
    rows = spark.sql({QUERY!r}).count()
    times.append(time.perf_counter() - started)
print(json.dumps({{"rows": rows, "query_s": times[-1]}}))
spark.stop()
"""
DUCKDB_QUERY = f"""
import json, pathlib, sys, time
import duckdb
db = duckdb.connect()
db.execute("SET TimeZone = 'UTC'")
db.execute("SET enable_progress_bar = false")  # it would print to stdout on long queries
batches = ", ".join(f"'{{p.stem}}'" for p in pathlib.Path(sys.argv[1], "_manifest").glob("*.json"))
files = sys.argv[1] + "/table=events/*/*/*.parquet"
source = f"(SELECT * FROM read_parquet('{{files}}', hive_partitioning = true) "
source += f"WHERE batch IN ({{batches}})) AS events"
started = time.perf_counter()
query = {QUERY!r}.replace("FROM events", "FROM " + source)
rows = db.execute(f"SELECT count(*) FROM ({{query}})").fetchone()[0]
print(json.dumps({{"rows": rows, "query_s": time.perf_counter() - started}}))
"""


@dataclass
class Peak:
    """Peak resident memory of a process tree, by kind of process, in MiB."""

    total: float = 0.0
    jvm: float = 0.0
    python: float = 0.0


def _tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


def _rss(pid: int) -> tuple[str, float]:
    try:
        with open(f"/proc/{pid}/comm") as comm, open(f"/proc/{pid}/statm") as statm:
            return comm.read().strip(), int(statm.read().split()[1]) * PAGE / 2**20
    except OSError:
        return "", 0.0


def measure(command: list[str]) -> tuple[float, Peak, str]:
    """Run `command`, sampling its tree's RSS; return wall seconds, the peak and its stdout."""
    peak = Peak()
    started = time.perf_counter()
    child = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.2):
            jvm = python = 0.0
            for pid in _tree(child.pid):
                name, rss = _rss(pid)
                if name == "java":
                    jvm += rss
                else:
                    python += rss
            peak.jvm, peak.python = max(peak.jvm, jvm), max(peak.python, python)
            peak.total = max(peak.total, jvm + python)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, _ = child.communicate()
    done.set()
    sampler.join()
    if child.returncode:
        raise SystemExit(f"{' '.join(command)} exited {child.returncode}")
    return time.perf_counter() - started, peak, out


def main() -> int:
    """Write the events if needed, then time the floor, report and replay."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--work", type=Path, default=ROOT / "bench" / "results" / "pipeline")
    parser.add_argument(
        "--jobs",
        nargs="+",
        default=["floor", "ingest", "report", "replay", "spark-query", "duckdb-query"],
    )
    args = parser.parse_args()
    policy_file = ROOT / "examples" / "policy.yaml"
    audit = args.work / f"audit-{args.events}"
    if not (audit / "DONE").exists():
        started = time.perf_counter()
        policy = load_policy(policy_file.read_text(), str(policy_file))
        write_bulk(audit, policy, args.events, files=100)
        (audit / "DONE").touch()
        print(f"wrote {args.events:,} events in {time.perf_counter() - started:.0f} s")
    size = sum(f.stat().st_size for f in audit.glob("*.jsonl"))
    # The candidate: at least a day of retention instead of an hour.
    candidate = args.work / "candidate.yaml"
    candidate.write_text(
        policy_file.read_text().replace("{min: 1h, max: 30d}", "{min: 1d, max: 30d}")
    )
    # The cluster the events were judged against: the facts the events do not carry.
    snapshot = write_snapshot(args.work / "snapshot.jsonl", example_cluster())
    cli = [str(Path(sys.executable).parent / "kafka-policy-proxy"), "pipeline"]
    local = ["--master", "local[2]"]
    lake = args.work / f"lake-{args.events}"
    lake_input = ["--lake", str(lake)]
    raw_input = ["--audit", str(audit)]
    if "ingest" in args.jobs:
        shutil.rmtree(lake, ignore_errors=True)

    def report(source: list[str]) -> list[str]:
        return [*cli, "report", *source, "--out", str(args.work / "report"), *local]

    def replay(source: list[str]) -> list[str]:
        out = ["--out", str(args.work / "replay"), "--snapshot", str(snapshot)]
        return [*cli, "replay", "--policy", str(candidate), *source, *out, *local]

    runs = {
        "floor": [sys.executable, "-c", FLOOR, str(audit)],
        "ingest": [*cli, "ingest", *raw_input, "--lake", str(lake), *local],
        "report": report(lake_input),
        "replay": replay(lake_input),
        "report-raw": report(raw_input),
        "replay-raw": replay(raw_input),
        "spark-query": [sys.executable, "-c", SPARK_QUERY, str(lake)],
        "duckdb-query": [sys.executable, "-c", DUCKDB_QUERY, str(lake)],
    }
    results = {}
    print(f"{args.events:,} events, {size / 2**30:.1f} GiB, local[2]")
    print("| job | wall (s) | events/s | peak RSS total (MiB) | JVM | Python | query alone (s) |")
    print("|---|---|---|---|---|---|---|")
    for name in args.jobs:
        command = runs[name]
        wall, peak, out = measure(command)
        query = json.loads(out.splitlines()[-1]).get("query_s") if "query" in name else None
        results[name] = {
            "wall_s": wall,
            "query_s": query,
            "peak": peak.__dict__,
            "stdout": out[-2000:],
        }
        print(
            f"| {name} | {wall:.1f} | {args.events / wall:,.0f} | {peak.total:,.0f} "
            f"| {peak.jvm:,.0f} | {peak.python:,.0f} | {'' if query is None else f'{query:.1f}'} |",
            flush=True,
        )
    _ratios(results)
    (args.work / f"results-{'-'.join(args.jobs)}.json").write_text(json.dumps(results, indent=2))
    return 0


def _ratios(results: dict[str, dict[str, Any]]) -> None:
    if "floor" in results and "ingest" in results:
        ratio = results["ingest"]["wall_s"] / results["floor"]["wall_s"]
        print(f"ingest / read floor: {ratio:.2f}x (target <= 1.5x)")
    if "spark-query" in results and "duckdb-query" in results:
        spark, duck = results["spark-query"], results["duckdb-query"]
        print(f"Spark / DuckDB end to end: {spark['wall_s'] / duck['wall_s']:.1f}x")
        print(
            f"Spark / DuckDB query alone: {spark['query_s'] / duck['query_s']:.1f}x (target <= 3x)"
        )


if __name__ == "__main__":
    sys.exit(main())
