"""The Spark jobs over millions of audit events on local[2]: wall time, events/s, peak memory.

Run from the repository's root:

    .venv/bin/python -m bench.pipeline_bench [--shape realistic|distinct] [--events 10000000]
        [--work DIR] [--jobs ...] [--repeat N]

Two data sets, each in its own directory under --work (`<shape>-<events>/`), written once:
- `realistic`: audit traffic shaped like a shared cluster's (harness/audit_traffic.py), every
  decision judged against a cluster that evolves; its counts go to `stats.json` beside it;
- `distinct`: a pool of 100,000 distinct events re-stamped (harness/audit_data.write_bulk),
  the worst case for the aggregates.
Both are 100 files, like rotated logs. `--jobs` with no job only writes the data;
`--topics` and `--principals` size the realistic population (1,800 and 120 by default).

Each job runs as the real CLI (or a `python -c` program, bench/pipeline_queries.py) in a
child process; the RSS of its whole process tree (the Python driver, the Spark JVM and the
Python workers) is sampled every 0.2 s. The jobs, in the order given:

- `floor`: a plain Spark line count of the files, the cost of reading them at all;
- `typed-floor`: Spark's own typed JSON read of them (`from_json` with the record's schema,
  every field forced by a hash), the floor ingest is held to (ingest / typed-floor printed);
- `ingest`: the files into a fresh lake (`pipeline ingest`);
- `report`: the report from the lake, twice: `report-cold` is its first run after ingest,
  `report-warm` the same command again at once. Each is a fresh CLI process (a new JVM), so
  warm means only what the first run leaves behind: the lake's files in the OS page cache,
  and whatever the report itself keeps in the lake or its output directory;
- `replay`: the candidate policy from the lake (`report-raw`, `replay-raw`: from the JSON);
- `spark-query`, `duckdb-query`: the report's queries over the lake's rollup tables, in Spark
  and in DuckDB: the whole process as a user runs it, and the queries alone (the second
  round in the same session, collected). Skipped, saying so, if the lake has no rollups.

With `--repeat N` the jobs run N times in alternation (ingest into a fresh lake each time)
and a table of medians follows.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.pipeline_queries import (
    DUCKDB_QUERIES,
    FLOOR,
    NO_ROLLUPS,
    REPORT_QUERIES,
    SPARK_QUERIES,
    TYPED_FLOOR,
)
from harness.audit_data import example_cluster, write_bulk, write_snapshot
from harness.audit_traffic import Shape, write_traffic
from harness.traffic_stats import file_stats
from kafka_policy_proxy.policy.loader import load_policy

ROOT = Path(__file__).resolve().parent.parent
POLICY = ROOT / "examples" / "policy.yaml"
PAGE = os.sysconf("SC_PAGE_SIZE")
# The jobs whose last line of output is JSON (bench/pipeline_queries.py).
PROGRAMS = ("typed-floor", "spark-query", "duckdb-query")
JOBS = ("floor", "typed-floor", "ingest", "report", "replay", "spark-query", "duckdb-query")


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


def write_data(shape: str, traffic_shape: Shape, data: Path) -> Path:
    """The audit files of the shape (written once) and the snapshot replay judges against."""
    events = traffic_shape.events
    audit, snapshot = data / "audit", data / "snapshot.jsonl"
    if (data / "DONE").exists():
        return snapshot
    shutil.rmtree(data, ignore_errors=True)
    policy = load_policy(POLICY.read_text(), str(POLICY))
    started = time.perf_counter()
    if shape == "realistic":
        traffic = write_traffic(audit, policy, traffic_shape, files=100)
        # The cluster as the traffic left it: what a snapshot taken afterwards would hold.
        write_snapshot(snapshot, traffic.snapshot())
        judged = {"judgements": traffic.judged}
    else:
        write_bulk(audit, policy, events, files=100)
        write_snapshot(snapshot, example_cluster())
        judged = {}
    seconds = time.perf_counter() - started
    stats = file_stats(audit) | judged | {"seconds": seconds, "events_per_s": events / seconds}
    (data / "stats.json").write_text(json.dumps(stats, indent=2))
    (data / "DONE").touch()
    print(f"wrote {events:,} {shape} events in {seconds:.0f} s ({events / seconds:,.0f}/s)")
    print(json.dumps(stats, indent=2))
    return snapshot


def main() -> int:
    """Write the data set if needed, then time the jobs (in alternation with --repeat)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=("realistic", "distinct"), default="realistic")
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--work", type=Path, default=ROOT / "bench" / "results" / "pipeline")
    parser.add_argument("--jobs", nargs="*", choices=(*JOBS, "report-raw", "replay-raw"))
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--topics", type=int, default=Shape.topics, help="realistic: population")
    parser.add_argument("--principals", type=int, default=Shape.principals)
    args = parser.parse_args()
    jobs = list(JOBS) if args.jobs is None else args.jobs
    shape = Shape(events=args.events, topics=args.topics, principals=args.principals)
    data = args.work / f"{args.shape}-{args.events}"
    population = (args.topics, args.principals)
    if args.shape == "realistic" and population != (Shape.topics, Shape.principals):
        data = data.with_name(f"{data.name}-{shape.topics}-topics-{shape.principals}-principals")
    snapshot = write_data(args.shape, shape, data)
    audit, lake = data / "audit", data / "lake"
    size = sum(f.stat().st_size for f in audit.glob("*.jsonl"))
    runs = _commands(args.work, audit, lake, snapshot)
    rows: dict[str, list[dict[str, Any]]] = {}
    print(f"{args.events:,} {args.shape} events, {size / 2**30:.2f} GiB, local[2]")
    print("| job | wall (s) | events/s | peak RSS total (MiB) | JVM | Python | queries alone (s) |")
    print("|---|---|---|---|---|---|---|")
    for _ in range(args.repeat):
        for job in jobs:
            if job == "ingest":
                shutil.rmtree(lake, ignore_errors=True)
            names = ["report-cold", "report-warm"] if job == "report" else [job]
            for name in names:
                row = _run(name, runs[job], args.events)
                rows.setdefault(name, []).append(row)
    _medians(rows, args.events, args.repeat)
    _ratios(rows)
    out = args.work / f"results-{args.shape}-{args.events}-{'-'.join(jobs)}.json"
    out.write_text(json.dumps(rows, indent=2))
    return 0


def _commands(work: Path, audit: Path, lake: Path, snapshot: Path) -> dict[str, list[str]]:
    # The candidate: at least a day of retention instead of an hour.
    candidate = work / "candidate.yaml"
    candidate.write_text(POLICY.read_text().replace("{min: 1h, max: 30d}", "{min: 1d, max: 30d}"))
    cli = [str(Path(sys.executable).parent / "kafka-policy-proxy"), "pipeline"]
    local = ["--master", "local[2]"]
    lake_input, raw_input = ["--lake", str(lake)], ["--audit", str(audit)]

    def report(source: list[str]) -> list[str]:
        return [*cli, "report", *source, "--out", str(work / "report"), *local]

    def replay(source: list[str]) -> list[str]:
        out = ["--out", str(work / "replay"), "--snapshot", str(snapshot)]
        return [*cli, "replay", "--policy", str(candidate), *source, *out, *local]

    queries = json.dumps(REPORT_QUERIES)
    return {
        "floor": [sys.executable, "-c", FLOOR, str(audit)],
        "typed-floor": [sys.executable, "-c", TYPED_FLOOR, str(audit)],
        "ingest": [*cli, "ingest", *raw_input, "--lake", str(lake), *local],
        "report": report(lake_input),
        "replay": replay(lake_input),
        "report-raw": report(raw_input),
        "replay-raw": replay(raw_input),
        "spark-query": [sys.executable, "-c", SPARK_QUERIES, str(lake), queries],
        "duckdb-query": [sys.executable, "-c", DUCKDB_QUERIES, str(lake), queries],
    }


def _run(name: str, command: list[str], events: int) -> dict[str, Any]:
    """One run of a job, printed as a row of the table as soon as it is done."""
    wall, peak, out = measure(command)
    last = json.loads(out.splitlines()[-1]) if name in PROGRAMS and out.strip() else {}
    if last.get("rows", events) != events and name == "typed-floor":
        raise SystemExit(f"typed-floor read {last['rows']:,} lines of {events:,}")
    if "skipped" in last:
        print(f"| {name} | skipped: {last['skipped']} | | | | | |", flush=True)
        return {"skipped": last["skipped"]}
    query = last.get("query_s")
    print(
        f"| {name} | {wall:.1f} | {events / wall:,.0f} | {peak.total:,.0f} "
        f"| {peak.jvm:,.0f} | {peak.python:,.0f} | {'' if query is None else f'{query:.2f}'} |",
        flush=True,
    )
    return {"wall_s": wall, "query_s": query, "peak": peak.__dict__, "stdout": out[-2000:]}


def _medians(rows: dict[str, list[dict[str, Any]]], events: int, repeat: int) -> None:
    if repeat < 2:
        return
    print(f"\nmedians of {repeat} alternating runs")
    print("| job | wall (s), median | min | max | events/s | peak RSS max (MiB) | queries alone |")
    print("|---|---|---|---|---|---|---|")
    for name, runs in rows.items():
        done = [r for r in runs if "wall_s" in r]
        if not done:
            print(f"| {name} | skipped: {NO_ROLLUPS} | | | | | |")
            continue
        walls = [r["wall_s"] for r in done]
        median = statistics.median(walls)
        queries = [r["query_s"] for r in done if r["query_s"] is not None]
        query = f"{statistics.median(queries):.2f}" if queries else ""
        peak = max(r["peak"]["total"] for r in done)
        print(
            f"| {name} | {median:.1f} | {min(walls):.1f} | {max(walls):.1f} "
            f"| {events / median:,.0f} | {peak:,.0f} | {query} |"
        )


def _median(rows: dict[str, list[dict[str, Any]]], name: str, key: str) -> float | None:
    values = [r[key] for r in rows.get(name, ()) if r.get(key) is not None]
    return statistics.median(values) if values else None


def _ratios(rows: dict[str, list[dict[str, Any]]]) -> None:
    ingest, typed = _median(rows, "ingest", "wall_s"), _median(rows, "typed-floor", "wall_s")
    floor = _median(rows, "floor", "wall_s")
    if ingest and typed:
        print(f"ingest / typed-floor: {ingest / typed:.2f}x (target <= 1.5x)")
    if ingest and floor:
        print(f"ingest / line-count floor: {ingest / floor:.2f}x")
    spark, duck = _median(rows, "spark-query", "wall_s"), _median(rows, "duckdb-query", "wall_s")
    if spark and duck:
        print(f"Spark / DuckDB end to end: {spark / duck:.1f}x")
    spark, duck = _median(rows, "spark-query", "query_s"), _median(rows, "duckdb-query", "query_s")
    if spark and duck:
        ratio = spark / duck
        print(f"Spark / DuckDB, the report's queries alone, warm: {ratio:.1f}x (target <= 3x)")


if __name__ == "__main__":
    sys.exit(main())
