"""Produce and consume 1 KiB records direct and through the proxy, alternating, in one run.

Usage: python bench/throughput.py [--records N] [--repeats R] [--latency-samples S]
Starts its own cluster (scripts/local_kafka.py) and proxy on ports 45092+ and 45400+.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.integration.support import ProxyProcess, load_launcher

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


def produce(bootstrap: str, topic: str, records: int) -> float:
    """Produce records as fast as the client can; return seconds until all are acknowledged."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "acks": "all",
            "batch.size": 262144,
            **QUIET,
        }
    )
    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, RECORD, key=str(i % 64).encode())
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    return time.perf_counter() - start


def consume(bootstrap: str, topic: str, records: int, partitions: int) -> float:
    """Fetch every record from offset 0 (assigned, no group); seconds from first to last record."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{topic}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52428800,
            **QUIET,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got = 0
    start = None
    deadline = time.perf_counter() + 300
    while got < records and time.perf_counter() < deadline:
        batch = consumer.consume(10000, timeout=1)
        if batch and start is None:
            start = time.perf_counter()
        got += sum(1 for m in batch if m.error() is None)
    elapsed = time.perf_counter() - (start or 0)
    consumer.close()
    assert got == records, f"consumed {got} of {records}"
    return elapsed


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
    args = parser.parse_args()

    launcher = load_launcher()
    work = Path(tempfile.mkdtemp(prefix="kpp-bench-"))
    kafka = launcher.LocalKafka(work / "cluster", brokers=3, port_base=45092)
    kafka.up(timeout=180)
    proxy = ProxyProcess(work, kafka.bootstrap_servers, 45400, 45500)
    targets = {"direct": kafka.bootstrap_servers, "proxy": proxy.bootstrap}
    results: dict[str, dict[str, list[float]]] = {
        t: {"produce_s": [], "consume_s": [], "latency_ms": []} for t in targets
    }
    try:
        for bootstrap in targets.values():  # warm-up: JIT, connections, page cache
            topic = create_topic(bootstrap, args.partitions)
            produce(bootstrap, topic, args.records // 5)
            consume(bootstrap, topic, args.records // 5, args.partitions)
        for repeat in range(args.repeats):
            for target, bootstrap in targets.items():
                topic = create_topic(bootstrap, args.partitions)
                results[target]["produce_s"].append(produce(bootstrap, topic, args.records))
                results[target]["consume_s"].append(
                    consume(bootstrap, topic, args.records, args.partitions)
                )
                lat_topic = create_topic(bootstrap, 1)
                results[target]["latency_ms"] += produce_latency(
                    bootstrap, lat_topic, args.latency_samples
                )
                print(
                    f"repeat {repeat + 1} {target}: produce {results[target]['produce_s'][-1]:.2f}s"
                    f" consume {results[target]['consume_s'][-1]:.2f}s",
                    file=sys.stderr,
                )
    finally:
        proxy.stop()
        kafka.down()

    mb = args.records * len(RECORD) / 1e6
    rows = {}
    for target, r in results.items():
        produce_s = statistics.median(r["produce_s"])
        consume_s = statistics.median(r["consume_s"])
        rows[target] = {
            "produce_rps": args.records / produce_s,
            "produce_mbs": mb / produce_s,
            "consume_rps": args.records / consume_s,
            "consume_mbs": mb / consume_s,
            "p50_ms": percentile(r["latency_ms"], 50),
            "p99_ms": percentile(r["latency_ms"], 99),
        }
    d, p = rows["direct"], rows["proxy"]
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
    print(
        f"| proxy/direct | {p['produce_rps'] / d['produce_rps']:.2f} | | "
        f"{p['consume_rps'] / d['consume_rps']:.2f} | | +{p['p50_ms'] - d['p50_ms']:.2f} | "
        f"+{p['p99_ms'] - d['p99_ms']:.2f} |"
    )
    print(json.dumps({"args": vars(args), "raw": results}), file=sys.stderr)


if __name__ == "__main__":
    main()
