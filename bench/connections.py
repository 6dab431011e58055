"""Memory per connection, idle and active, at 1,000 and ~10,000 connections, and accept rate.

Usage: python -m bench.connections [--counts 1000,9500] [--rounds 2] [--accept 2000]
Starts its own cluster (ports 25092+) and proxy (25400+), with the proxy's connection limits
raised to fit. A connection is idle once the proxy has connected it to its broker, and active
once it has had an ApiVersions and a Metadata answer; its cost is the proxy's RSS growth
divided by the count. Each count runs `--rounds` times, all connections closed in between, so
a curve that does not come back flat shows. Accept rate: `--accept` connections opened 100
at a time, each until its first ApiVersions answer, direct to the brokers and through the
proxy, in the same run, with the proxy's CPU time per connection (from /proc), which the
client's own speed does not blur. The proxy needs two descriptors per connection: the count
is bounded by the hard RLIMIT_NOFILE (20,000 on the development machine, so 9,500).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.throughput import cpu_seconds
from harness.local_kafka import LocalKafka
from harness.messages import build
from harness.proxy_process import ProxyProcess
from kafka_policy_proxy.codec.header import request_header
from kafka_policy_proxy.codec.registry import encode, request_class

PORT_BASE, BOOTSTRAP, NODE_BASE = 25092, 25400, 25500
BROKERS = 3


def frame(api_key: int, version: int, correlation_id: int, **fields: Any) -> bytes:
    """One request frame: size, header, body."""
    cls = request_class(api_key, version)
    body = request_header(api_key, version, correlation_id, "bench") + encode(build(cls, **fields))
    return struct.pack(">i", len(body)) + body


API_VERSIONS = frame(18, 3, 1, client_software_name="bench", client_software_version="1")
METADATA = frame(
    3, 12, 2, topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False
)


def rss_kib(pid: int) -> int:
    """Resident memory now (VmRSS), KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def open_fds(pid: int) -> int:
    """File descriptors the process has open."""
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    """One response frame."""
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return await reader.readexactly(size)


async def open_many(ports: list[int], count: int) -> list[tuple[Any, Any]]:
    """`count` connections spread over `ports`, opened 200 at a time."""
    conns: list[tuple[Any, Any]] = []
    for start in range(0, count, 200):
        batch = [
            asyncio.open_connection("127.0.0.1", ports[i % len(ports)])
            for i in range(start, min(count, start + 200))
        ]
        conns += await asyncio.gather(*batch)
    return conns


async def until_fds(pid: int, done: Any, what: str) -> None:
    """Poll the proxy's descriptor count (no event tells) until `done(count)`, for 2 minutes."""
    deadline = time.monotonic() + 120
    while not done(open_fds(pid)):
        if time.monotonic() > deadline:
            raise RuntimeError(f"proxy has {open_fds(pid)} fds; expected {what}")
        await asyncio.sleep(0.2)
    await asyncio.sleep(1)


async def activate(conns: list[tuple[Any, Any]]) -> None:
    """Each connection: ApiVersions, then Metadata, each answered."""
    for start in range(0, len(conns), 500):

        async def one(reader: Any, writer: Any) -> None:
            writer.write(API_VERSIONS)
            await read_frame(reader)
            writer.write(METADATA)
            await read_frame(reader)

        await asyncio.gather(*(one(r, w) for r, w in conns[start : start + 500]))


async def close_all(conns: list[tuple[Any, Any]]) -> None:
    """Close every connection and wait for it."""
    for _, writer in conns:
        writer.close()
    await asyncio.gather(*(w.wait_closed() for _, w in conns), return_exceptions=True)


async def memory(pid: int, ports: list[int], count: int, rounds: int) -> list[dict[str, float]]:
    """RSS per connection, idle and active, `rounds` times."""
    rows = []
    for round_ in range(rounds):
        base_fds = open_fds(pid)
        before = rss_kib(pid)
        conns = await open_many(ports, count)
        # Each client's socket and its broker connection; the base count may have held a
        # connection of the proxy's own (cluster state) that has closed since.
        want = base_fds + 2 * count - 10
        await until_fds(pid, lambda n, w=want: n >= w, f"at least {want}")
        idle = rss_kib(pid)
        await activate(conns)
        await asyncio.sleep(1)
        active = rss_kib(pid)
        await close_all(conns)
        await until_fds(pid, lambda n, b=base_fds: n <= b + 10, f"about {base_fds}")
        after = rss_kib(pid)
        row = {
            "connections": count,
            "round": round_ + 1,
            "rss_before_mb": before / 1024,
            "idle_kib_per_conn": (idle - before) / count,
            "active_kib_per_conn": (active - before) / count,
            "rss_after_close_mb": after / 1024,
        }
        print(json.dumps(row), file=sys.stderr)
        rows.append(row)
    return rows


async def accept_rate(ports: list[int], count: int) -> float:
    """Connections per second, each opened and answered one ApiVersions, 100 at a time."""

    async def one(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(API_VERSIONS)
        await read_frame(reader)
        writer.close()
        await writer.wait_closed()

    start = time.perf_counter()
    for first in range(0, count, 100):
        await asyncio.gather(*(one(ports[i % len(ports)]) for i in range(first, first + 100)))
    return count / (time.perf_counter() - start)


def main() -> None:
    """Run the measurements and print Markdown tables."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--counts", default="1000,9500")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--accept", type=int, default=2000)
    parser.add_argument("--accept-runs", type=int, default=5)
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    # The proxy holds two descriptors per connection (client and broker side) and inherits
    # this process's limit: raise the soft limit to the hard one, and refuse what cannot fit.
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if 2 * max(counts) + 200 > hard:
        parser.error(
            f"{max(counts)} connections need {2 * max(counts) + 200} descriptors; "
            f"the hard limit here is {hard}"
        )
    work = Path(tempfile.mkdtemp(prefix="kpp-conn-bench-"))
    kafka = LocalKafka(work / "cluster", brokers=BROKERS, port_base=PORT_BASE)
    kafka.up(timeout=180)
    limit = 2 * max(counts) + 1000
    extra = {"limits": {"max_connections": limit, "max_connections_per_listener": limit}}
    proxy = ProxyProcess(work, kafka.bootstrap_servers, BOOTSTRAP, NODE_BASE, extra)
    node_ports = [NODE_BASE + n for n in range(1, BROKERS + 1)]
    direct_ports = [PORT_BASE + n - 1 for n in range(1, BROKERS + 1)]
    try:
        rows = [
            r
            for c in counts
            for r in asyncio.run(memory(proxy.process.pid, node_ports, c, args.rounds))
        ]
        rates: dict[str, list[float]] = {"direct": [], "proxy": []}
        cpu_us: list[float] = []  # the proxy's CPU per connection, from /proc, per run
        for _ in range(args.accept_runs):
            rates["direct"].append(asyncio.run(accept_rate(direct_ports, args.accept)))
            before = cpu_seconds(proxy.process.pid)
            rates["proxy"].append(asyncio.run(accept_rate(node_ports, args.accept)))
            cpu_us.append((cpu_seconds(proxy.process.pid) - before) / args.accept * 1e6)
        peak = [ln for ln in Path(f"/proc/{proxy.process.pid}/status").read_text().splitlines()]
        hwm = next(int(ln.split()[1]) for ln in peak if ln.startswith("VmHWM:"))
    finally:
        proxy.stop()
        kafka.down()
    print(
        "| connections | round | RSS before MB | idle KiB/conn | active KiB/conn "
        "| RSS after close MB |"
    )
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['connections']:,} | {r['round']} | {r['rss_before_mb']:.1f} | "
            f"{r['idle_kib_per_conn']:.1f} | {r['active_kib_per_conn']:.1f} | "
            f"{r['rss_after_close_mb']:.1f} |"
        )
    print(f"\npeak RSS of the proxy: {hwm / 1024:.1f} MB")
    print("\n| path | accept rate, connections/s (median) | per run |")
    print("|---|---|---|")
    for name, values in rates.items():
        runs = ", ".join(f"{v:,.0f}" for v in values)
        print(f"| {name} | {statistics.median(values):,.0f} | {runs} |")
    runs = ", ".join(f"{v:,.0f}" for v in cpu_us)
    print(f"\nproxy CPU per connection: {statistics.median(cpu_us):,.0f} µs (median; {runs})")


if __name__ == "__main__":
    main()
