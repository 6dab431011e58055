"""Produce and consume 1 KiB records direct and through the proxy, alternating, in one run.

Throughput comes from Kafka's own kafka-producer-perf-test and kafka-consumer-perf-test (the
same jars as the cluster); latency from single librdkafka produce round trips.

Usage: python bench/throughput.py [--records N] [--repeats R] [--latency-samples S]
                                 [--baseline TREE]
Starts its own cluster (scripts/local_kafka.py) and proxy on ports 23092+ and 23400+.
`--baseline TREE` also runs the proxy from another checkout (e.g. the previous commit, from
`git worktree add`) on ports 23600+, in the same rotation, so a change is measured against
what it replaces in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.integration.support import ProxyProcess, load_launcher

BASELINE_PORT = 23600

RECORD = b"x" * 1024
QUIET = {"log_level": 3}


def create_topic(bootstrap: str, partitions: int) -> str:
    """A fresh topic for one measurement."""
    name = f"bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(30)
    time.sleep(1)
    return name


def perf_produce(kafka: Any, bootstrap: str, topic: str, records: int) -> float:
    """kafka-producer-perf-test: records/s for 1 KiB records as fast as the producer can."""
    out = _tool(
        kafka,
        "kafka-producer-perf-test",
        "--topic",
        topic,
        "--num-records",
        str(records),
        "--record-size",
        "1024",
        "--throughput",
        "-1",
        "--producer-props",
        f"bootstrap.servers={bootstrap}",
        "acks=all",
        "linger.ms=5",
        "batch.size=262144",
    )
    # "... 300000 records sent, 61312.1 records/sec (59.88 MB/sec), ..."
    return float(out.strip().splitlines()[-1].split(",")[1].split()[0])


def perf_consume(kafka: Any, bootstrap: str, topic: str, records: int) -> float:
    """kafka-consumer-perf-test: fetch records/s (group join time excluded)."""
    out = _tool(
        kafka,
        "kafka-consumer-perf-test",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--messages",
        str(records),
        "--timeout",
        "120000",
    )
    return float(out.strip().splitlines()[-1].split(",")[9])


def _tool(kafka: Any, name: str, *args: str) -> str:
    result = subprocess.run(
        kafka.tool_command(name, *args), capture_output=True, text=True, timeout=600, check=True
    )
    return result.stdout


def produce_latency(bootstrap: str, topic: str, samples: int) -> list[float]:
    """Milliseconds from produce() to acknowledgement, one record in flight at a time."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all", **QUIET})
    producer.produce(topic, RECORD)
    producer.flush(30)
    latencies = []
    for _ in range(samples):
        start = time.perf_counter()
        producer.produce(topic, RECORD)
        producer.flush(30)
        latencies.append((time.perf_counter() - start) * 1000)
    return latencies


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds a process has used so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def baseline_proxy(
    work: Path,
    upstream: str,
    tree: Path,
    port: int = BASELINE_PORT,
    extra: dict[str, Any] | None = None,
) -> ProxyProcess:
    """The proxy of another checkout, run from this venv with that tree first on the path."""
    workdir = work / "baseline"
    workdir.mkdir()
    env = {"PYTHONPATH": str(tree.resolve())}
    return ProxyProcess(workdir, upstream, port, port + 100, extra, env=env)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) by nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def main() -> None:
    """Run the benchmark and print a Markdown table plus the raw JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--latency-samples", type=int, default=2000)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="a checkout whose proxy runs alongside")
    args = parser.parse_args()

    launcher = load_launcher()
    work = Path(tempfile.mkdtemp(prefix="kpp-bench-"))
    kafka = launcher.LocalKafka(work / "cluster", brokers=3, port_base=23092)
    kafka.up(timeout=180)
    proxies = {"proxy": ProxyProcess(work, kafka.bootstrap_servers, 23400, 23500)}
    if args.baseline is not None:
        proxies["baseline"] = baseline_proxy(work, kafka.bootstrap_servers, args.baseline)
    targets = {"direct": kafka.bootstrap_servers, **{n: p.bootstrap for n, p in proxies.items()}}
    results: dict[str, dict[str, list[float]]] = {
        t: {"produce_rps": [], "consume_rps": [], "latency_ms": [], "cpu_s_per_gb": []}
        for t in targets
    }
    try:
        for bootstrap in targets.values():  # warm-up: JIT, connections, page cache
            topic = create_topic(bootstrap, args.partitions)
            perf_produce(kafka, bootstrap, topic, args.records // 5)
        for repeat in range(args.repeats):
            for target, bootstrap in targets.items():
                topic = create_topic(bootstrap, args.partitions)
                r = results[target]
                pid = proxies[target].process.pid if target in proxies else None
                before = 0.0 if pid is None else cpu_seconds(pid)
                r["produce_rps"].append(perf_produce(kafka, bootstrap, topic, args.records))
                r["consume_rps"].append(perf_consume(kafka, bootstrap, topic, args.records))
                if pid is not None:
                    moved_gb = 2 * args.records * len(RECORD) / 1e9  # produced, then consumed
                    r["cpu_s_per_gb"].append((cpu_seconds(pid) - before) / moved_gb)
                lat_topic = create_topic(bootstrap, 1)
                r["latency_ms"] += produce_latency(bootstrap, lat_topic, args.latency_samples)
                print(
                    f"repeat {repeat + 1} {target}: produce {r['produce_rps'][-1]:,.0f}/s "
                    f"consume {r['consume_rps'][-1]:,.0f}/s",
                    file=sys.stderr,
                )
    finally:
        for proxy in proxies.values():
            proxy.stop()
        kafka.down()

    rows = {}
    for target, r in results.items():
        produce_rps = statistics.median(r["produce_rps"])
        consume_rps = statistics.median(r["consume_rps"])
        rows[target] = {
            "produce_rps": produce_rps,
            "produce_mbs": produce_rps * len(RECORD) / 1e6,
            "consume_rps": consume_rps,
            "consume_mbs": consume_rps * len(RECORD) / 1e6,
            "p50_ms": percentile(r["latency_ms"], 50),
            "p99_ms": percentile(r["latency_ms"], 99),
        }
    d = rows["direct"]
    print(
        "| path | produce rec/s | produce MB/s | consume rec/s | consume MB/s "
        "| produce p50 ms | produce p99 ms |"
    )
    print("|---|---|---|---|---|---|---|")
    for target, r in rows.items():
        print(
            f"| {target} | {r['produce_rps']:,.0f} | {r['produce_mbs']:.1f} | "
            f"{r['consume_rps']:,.0f} | {r['consume_mbs']:.1f} | {r['p50_ms']:.2f} | "
            f"{r['p99_ms']:.2f} |"
        )
    for name in proxies:
        p = rows[name]
        print(
            f"| {name}/direct | {p['produce_rps'] / d['produce_rps']:.2f} | | "
            f"{p['consume_rps'] / d['consume_rps']:.2f} | | {p['p50_ms'] - d['p50_ms']:+.2f} | "
            f"{p['p99_ms'] - d['p99_ms']:+.2f} |"
        )
    print("\n| proxy | CPU s per GB moved (produce + consume), median | per round |")
    print("|---|---|---|")
    for name in proxies:
        cpu = results[name]["cpu_s_per_gb"]
        rounds = ", ".join(f"{c:.2f}" for c in cpu)
        print(f"| {name} | {statistics.median(cpu):.2f} | {rounds} |")
    print(json.dumps({"args": vars(args), "raw": results}, default=str), file=sys.stderr)


if __name__ == "__main__":
    main()
