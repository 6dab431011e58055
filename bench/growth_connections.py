"""Added p50/p99 of single-record produce while 1, 1,000 and 9,500 connections are open.

Usage: python -m bench.growth_connections [--counts 1,1000,9500] [--samples 1000] [--rounds 3]
                                          [--chart docs/growth-connections.png]
Starts its own 3-broker cluster (ports 19200+, stride 10) and proxy (19280, nodes 19290+),
with the proxy's connection limits raised to fit. At each count, count - 1 idle connections
are held open through the proxy's node listeners by this process (raw sockets, each after an
ApiVersions and a Metadata answer), and one librdkafka producer sends single 1 KiB records,
one in flight at a time (acks=all), direct to the brokers and through the proxy, alternating,
`--rounds` times. Added latency is the proxy's percentile minus the direct one. The proxy's
RSS, its CPU seconds per produced record, and the CPU it uses while nothing is sent (`--idle`
seconds, before the rounds) come from /proc. The proxy needs two descriptors
per connection: the hard RLIMIT_NOFILE here is 20,000, so the largest count is 9,500.
`--tree DIR` runs the proxy from another checkout of the code (`git worktree add`, or a
`git archive` of a revision), to measure a change before and after. `--profile DIR` records
the proxy with py-spy through each idle window (DIR/idle-COUNT.txt, collapsed stacks).
"""

from __future__ import annotations

import argparse
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.connections import API_VERSIONS, METADATA, open_fds, rss_kib
from bench.growth_chart import draw
from bench.throughput import cpu_seconds, create_topic, percentile, produce_latency
from harness.frames import read_frame
from harness.local_kafka import LocalKafka
from harness.proxy_process import ProxyProcess

PORT_BASE, PORT_STRIDE, BOOTSTRAP, NODE_BASE = 19200, 10, 19280, 19290
BROKERS = 3


def hold_open(ports: list[int], count: int) -> list[socket.socket]:
    """`count` connections spread over `ports`, each answered an ApiVersions and a Metadata,
    opened 500 at a time with both requests written before any answer is read."""
    held: list[socket.socket] = []
    for first in range(0, count, 500):
        batch = [
            socket.create_connection(("127.0.0.1", ports[i % len(ports)]), timeout=60)
            for i in range(first, min(count, first + 500))
        ]
        for sock in batch:
            sock.sendall(API_VERSIONS + METADATA)
        for sock in batch:
            read_frame(sock)
            read_frame(sock)
        held += batch
    return held


def spy(pid: int, seconds: float, out: Path) -> None:
    """py-spy's collapsed stacks of a process over `seconds` (idle frames left out)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    py_spy = Path(sys.executable).parent / "py-spy"
    subprocess.run(
        [
            str(py_spy),
            "record",
            "--pid",
            str(pid),
            "--duration",
            str(round(seconds)),
            "--format",
            "raw",
            "--output",
            str(out),
            "--nonblocking",
        ],
        check=True,
        capture_output=True,
    )


def measure(
    kafka: Any,
    work: Path,
    counts: list[int],
    samples: int,
    rounds: int,
    *,
    idle_s: float = 5.0,
    tree: Path | None = None,
    profile: Path | None = None,
) -> list[dict[str, float]]:
    """Per count: direct and proxy p50/p99 (ms, medians over rounds), what the proxy adds,
    and the proxy's RSS and CPU per record; a proxy of its own on this bench's ports."""
    limit = 2 * max(counts) + 1000
    extra = {"limits": {"max_connections": limit, "max_connections_per_listener": limit}}
    env = None if tree is None else {"PYTHONPATH": str(tree)}
    proxy = ProxyProcess(work, kafka.bootstrap_servers, BOOTSTRAP, NODE_BASE, extra, env=env)
    node_ports = [NODE_BASE + n for n in range(1, BROKERS + 1)]
    held: list[socket.socket] = []
    rows = []
    try:
        topic = create_topic(kafka.bootstrap_servers, 1)
        for count in counts:
            held += hold_open(node_ports, count - 1 - len(held))
            fds = open_fds(proxy.process.pid)
            before = cpu_seconds(proxy.process.pid)
            if profile is None:
                time.sleep(idle_s)
            else:
                spy(proxy.process.pid, idle_s, profile / f"idle-{count}.txt")
            idle_ms_per_s = (cpu_seconds(proxy.process.pid) - before) / idle_s * 1e3
            runs: dict[str, list[tuple[float, float]]] = {"direct": [], "proxy": []}
            cpu_per_record: list[float] = []
            for _ in range(rounds):
                for path, bootstrap in (
                    ("direct", kafka.bootstrap_servers),
                    ("proxy", proxy.bootstrap),
                ):
                    before = cpu_seconds(proxy.process.pid)
                    ms = produce_latency(bootstrap, topic, samples)
                    if path == "proxy":
                        cpu_per_record.append((cpu_seconds(proxy.process.pid) - before) / samples)
                    runs[path].append((percentile(ms, 50), percentile(ms, 99)))
            row = {
                "connections": count,
                "proxy_fds": fds,
                "idle_cpu_ms_per_s": idle_ms_per_s,
                "rss_mb": rss_kib(proxy.process.pid) / 1024,
            }
            for path, values in runs.items():
                row[f"{path}_p50"] = statistics.median(v[0] for v in values)
                row[f"{path}_p99"] = statistics.median(v[1] for v in values)
            row["added_p50"] = row["proxy_p50"] - row["direct_p50"]
            row["added_p99"] = row["proxy_p99"] - row["direct_p99"]
            row["cpu_us_per_record"] = statistics.median(cpu_per_record) * 1e6
            rows.append(row)
    finally:
        for sock in held:
            sock.close()
        proxy.stop()
    return rows


def main() -> None:
    """Start the cluster, measure each count, print the table and draw the chart."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--counts", default="1,1000,9500")
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of idle CPU per count")
    parser.add_argument("--tree", type=Path, help="run the proxy from this checkout's code")
    parser.add_argument("--profile", type=Path, help="py-spy the idle windows into this folder")
    parser.add_argument("--chart", type=Path, default=Path("docs/growth-connections.png"))
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if 2 * max(counts) + 200 > hard:
        parser.error(f"{max(counts)} connections need {2 * max(counts) + 200} descriptors")
    work = Path(tempfile.mkdtemp(prefix="kpp-growth-conn-"))
    kafka = LocalKafka(
        work / "cluster", brokers=BROKERS, port_base=PORT_BASE, port_stride=PORT_STRIDE
    )
    kafka.up(timeout=300)
    try:
        rows = measure(
            kafka,
            work,
            counts,
            args.samples,
            args.rounds,
            idle_s=args.idle,
            tree=args.tree,
            profile=args.profile,
        )
    finally:
        kafka.down()
    print(
        f"single 1 KiB records, acks=all, one in flight; {args.samples} per path per round, "
        f"medians of {args.rounds} rounds, ms"
    )
    print(
        "| open connections | direct p50 | proxy p50 | added p50 | direct p99 | proxy p99 "
        "| added p99 | proxy CPU µs/record | proxy idle CPU ms/s | proxy RSS MB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['connections']:,.0f} | {r['direct_p50']:.3f} | {r['proxy_p50']:.3f} "
            f"| {r['added_p50']:+.3f} | {r['direct_p99']:.3f} | {r['proxy_p99']:.3f} "
            f"| {r['added_p99']:+.3f} | {r['cpu_us_per_record']:.0f} "
            f"| {r['idle_cpu_ms_per_s']:.1f} | {r['rss_mb']:.1f} |"
        )
    draw(
        args.chart,
        "Produce latency as connections grow",
        "open connections through the proxy",
        "ms (median of rounds)",
        {
            "proxy p50": [(r["connections"], r["proxy_p50"]) for r in rows],
            "proxy p99": [(r["connections"], r["proxy_p99"]) for r in rows],
            "direct p50": [(r["connections"], r["direct_p50"]) for r in rows],
            "direct p99": [(r["connections"], r["direct_p99"]) for r in rows],
        },
        guide="proxy p50",
        slope=0,
    )
    print(f"chart: {args.chart}")


if __name__ == "__main__":
    main()
