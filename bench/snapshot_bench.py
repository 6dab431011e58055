"""`kafka-policy-proxy snapshot` at 1,000 and 10,000 topics: wall time, output size, peak RSS.

Usage: python -m bench.snapshot_bench [--topics 1000,10000] [--repeats 5]
Starts its own 1-broker cluster (ports 22092+), creates topics of one partition in batches, and
runs the snapshot command as users run it (a subprocess) after each step, under /usr/bin/time
for its peak RSS. The Metadata fallback (for brokers without DescribeTopicPartitions) is
measured the same way, through a small wrapper process.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from harness.local_kafka import LocalKafka

CLI = Path(sys.executable).parent / "kafka-policy-proxy"
CREATE_BATCH = 500
# write_snapshot with the fallback forced; argv: bootstrap servers, output path.
FALLBACK = """
import asyncio, sys
from kafka_policy_proxy.proxy.cluster.snapshot import write_snapshot
with open(sys.argv[2], "w") as out:
    asyncio.run(write_snapshot(sys.argv[1], out, describe_topic_partitions=False))
"""


def create_topics(admin: AdminClient, names: list[str]) -> None:
    """Create single-partition topics, CREATE_BATCH per CreateTopics request."""
    for start in range(0, len(names), CREATE_BATCH):
        batch = [NewTopic(n, 1, 1) for n in names[start : start + CREATE_BATCH]]
        for future in admin.create_topics(batch, operation_timeout=120).values():
            future.result(timeout=180)


def wait_for(admin: AdminClient, count: int) -> None:
    """Wait until the broker's metadata lists `count` topics."""
    deadline = time.monotonic() + 300
    while len(admin.list_topics(timeout=60).topics) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the broker never listed {count} topics")
        time.sleep(0.5)


def measure(argv: list[str], out: Path) -> dict[str, Any]:
    """Run one snapshot process; its wall time, peak RSS, output size and topic count."""
    # Through /usr/bin/time, not getrusage/wait4 here: Linux counts the RSS a child had before
    # exec, i.e. this (much larger) process's, in the child's maximum.
    rss = out.with_suffix(".rss")
    start = time.perf_counter()
    result = subprocess.run(
        ["/usr/bin/time", "-o", str(rss), "-f", "%M", *argv],
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - start
    if result.returncode != 0:
        raise RuntimeError(f"{argv[:3]} exited {result.returncode}: {result.stderr}")
    last = json.loads(out.read_bytes().splitlines()[-1])
    return {
        "wall_s": wall,
        "rss_mib": int(rss.read_text().split()[-1]) / 1024,  # %M is in KiB
        "bytes": out.stat().st_size,
        "topics": last["topics"],
    }


def startup() -> tuple[float, float]:
    """Median wall s and peak RSS MiB of `snapshot --help`: interpreter and imports only."""
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        result = subprocess.run(
            ["/usr/bin/time", "-f", "%M", str(CLI), "snapshot", "--help"],
            capture_output=True,
            text=True,
            check=True,
        )
        runs.append((time.perf_counter() - start, int(result.stderr.split()[-1]) / 1024))
    return statistics.median(w for w, _ in runs), max(r for _, r in runs)


def main() -> None:
    """Grow the cluster step by step, snapshot after each step, print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--topics", default="1000,10000", help="cumulative topic counts")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    steps = [int(n) for n in args.topics.split(",")]
    work = Path(tempfile.mkdtemp(prefix="kpp-snapshot-bench-"))
    kafka = LocalKafka(work / "cluster", brokers=1, port_base=22092)
    bootstrap = kafka.up(timeout=180)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    rows = []
    try:
        created = 0
        for total in steps:
            started = time.perf_counter()
            create_topics(admin, [f"bench.snapshot.{i:05d}" for i in range(created, total)])
            wait_for(admin, total)
            print(f"{total} topics created in {time.perf_counter() - started:.0f} s", flush=True)
            created = total
            out = work / f"snapshot-{total}.jsonl"
            paths = {
                "DescribeTopicPartitions": [
                    str(CLI), "snapshot", "--bootstrap-server", bootstrap, "--out", str(out)
                ],
                "Metadata fallback": [sys.executable, "-c", FALLBACK, bootstrap, str(out)],
            }  # fmt: skip
            for path, argv in paths.items():
                measure(argv, out)  # warm-up: the broker may still be settling the new topics
                runs = [measure(argv, out) for _ in range(args.repeats)]
                assert all(r["topics"] == total for r in runs), runs
                rows.append(
                    (
                        total,
                        path,
                        statistics.median(r["wall_s"] for r in runs),
                        max(r["rss_mib"] for r in runs),
                        runs[-1]["bytes"],
                    )
                )
                print(rows[-1], flush=True)
    finally:
        del admin  # its threads would log every reconnect attempt while the broker stops
        kafka.down()
    wall, rss = startup()
    print(f"\nstartup alone (snapshot --help): {wall:.2f} s, {rss:.0f} MiB peak RSS")
    print("\n| topics | paging | wall s (median) | peak RSS MiB | output MB | bytes/topic |")
    print("|---|---|---|---|---|---|")
    for total, path, wall, rss, size in rows:
        print(
            f"| {total:,} | {path} | {wall:.2f} | {rss:.0f} | {size / 1e6:.1f} | "
            f"{size / total:,.0f} |"
        )


if __name__ == "__main__":
    main()
