"""The Spark jobs over 10 million audit events on local[2]: wall time, events/s, peak memory.

Run: .venv/bin/python bench/pipeline_bench.py [--events 10000000] [--work DIR]
The events are written once (100 files, like rotated audit logs) and kept under --work. Each
job runs as the real CLI in a child process; the RSS of its whole process tree (the Python
driver, the Spark JVM and the Python workers) is sampled every 0.2 s. A plain Spark line count
over the same files, in the same run, is the floor (`floor`): the cost of reading the input.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from policy.loader import load_policy  # noqa: E402
from tests.pipeline.audit_data import example_cluster, write_bulk, write_snapshot  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")
FLOOR = """
import sys
from pipeline.session import spark_session
spark = spark_session("local[2]")
print(spark.read.text(sys.argv[1]).count())
spark.stop()
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
    parser.add_argument("--jobs", nargs="+", default=["floor", "report", "replay"])
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
    runs = {
        "floor": [sys.executable, "-c", FLOOR, str(audit)],
        "report": [
            *cli,
            "report",
            "--audit",
            str(audit),
            "--out",
            str(args.work / "report"),
            *local,
        ],
        "replay": [
            *cli,
            "replay",
            "--policy",
            str(candidate),
            "--audit",
            str(audit),
            "--out",
            str(args.work / "replay"),
            "--snapshot",
            str(snapshot),
            *local,
        ],
    }
    results = {}
    print(f"{args.events:,} events, {size / 2**30:.1f} GiB, local[2]")
    print("| job | wall (s) | events/s | peak RSS total (MiB) | JVM | Python |")
    print("|---|---|---|---|---|---|")
    for name in args.jobs:
        command = runs[name]
        wall, peak, out = measure(command)
        results[name] = {"wall_s": wall, "peak": peak.__dict__, "stdout": out[-2000:]}
        print(
            f"| {name} | {wall:.0f} | {args.events / wall:,.0f} | {peak.total:,.0f} "
            f"| {peak.jvm:,.0f} | {peak.python:,.0f} |",
            flush=True,
        )
    (args.work / f"results-{'-'.join(args.jobs)}.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
