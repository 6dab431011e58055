"""Admin request latency, direct and through the enforcing proxy (examples/policy.yaml), one run.

Usage: python -m bench.admin_latency [--samples N] [--baseline TREE]
Starts its own cluster (ports 24092+) and proxy (24400+); requests go over one raw connection
each (harness/wire.py), so client overhead is the same on both paths. `--baseline TREE` also
runs the proxy of another checkout (ports 24600+) with the same policy, in the same rotation.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.throughput import baseline_proxy
from harness.local_kafka import LocalKafka
from harness.messages import build
from harness.proxy_process import ProxyProcess
from harness.wire import WireClient
from kafka_policy_proxy.codec.registry import request_class

REPO = Path(__file__).resolve().parents[1]


def create_request(names: list[str], validate_only: bool) -> Any:
    """CreateTopics v7 that the example policy allows for good names (3 partitions, RF 3)."""
    cls = request_class(19, 7)
    m = importlib.import_module(cls.__module__)
    config = build(m.CreatableTopicConfig, name="min.insync.replicas", value="2")
    topics = tuple(
        build(
            m.CreatableTopic,
            name=n,
            num_partitions=3,
            replication_factor=3,
            assignments=(),
            configs=(config,),
        )
        for n in names
    )
    return build(cls, topics=topics, timeout=60_000, validate_only=validate_only)


def alter_request(topic: str, retention_ms: int, validate_only: bool) -> Any:
    """IncrementalAlterConfigs v1: SET retention.ms on one topic."""
    cls = request_class(44, 1)
    m = importlib.import_module(cls.__module__)
    config = build(
        m.AlterableConfig, name="retention.ms", config_operation=0, value=str(retention_ms)
    )
    resource = build(
        m.AlterConfigsResource, resource_type=2, resource_name=topic, configs=(config,)
    )
    return build(cls, resources=(resource,), validate_only=validate_only)


def rotated(paths: dict[str, WireClient], i: int) -> list[tuple[str, WireClient]]:
    """The paths in an order that rotates with i: a fixed order favours or penalises a slot."""
    items = list(paths.items())
    start = i % len(items)
    return items[start:] + items[:start]


def timed(client: WireClient, message: Any) -> tuple[float, Any]:
    """Milliseconds for one request/response."""
    start = time.perf_counter()
    response = client.request(message)
    return (time.perf_counter() - start) * 1000, response


def main() -> None:
    """Measure each workload on both paths, alternating, and print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--baseline", type=Path, help="a checkout whose proxy runs alongside")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kpp-admin-bench-"))
    args.work = work
    kafka = LocalKafka(work / "cluster", brokers=3, port_base=24092)
    kafka.up(timeout=180)
    try:
        run(kafka, args)
    finally:
        kafka.down()


def run(kafka: Any, args: argparse.Namespace) -> None:
    """Measure with a proxy in front of the running cluster."""
    policy = {"policy": {"file": str(REPO / "examples" / "policy.yaml")}}
    proxies = {"proxy": ProxyProcess(args.work, kafka.bootstrap_servers, 24400, 24500, policy)}
    if args.baseline is not None:
        proxies["baseline"] = baseline_proxy(
            args.work, kafka.bootstrap_servers, args.baseline, 24600, policy
        )
    host, port = kafka.bootstrap_servers.split(",")[0].split(":")
    paths = {"direct": WireClient(host, int(port), timeout=120)}
    for name, proxy in proxies.items():
        paths[name] = WireClient("127.0.0.1", proxy.bootstrap_port, timeout=120)
    topic = "bench.latency"
    paths["direct"].request(create_request([topic], validate_only=False))
    time.sleep(2)
    results: dict[str, dict[str, list[float]]] = {p: {} for p in paths}
    try:
        # One phase per workload: a mutation invalidates the topic's cached state, so mixing
        # them would make every validate-only request a cache miss.
        phases = (
            (
                "CreateTopics validate_only, 1 topic",
                lambda i, h: create_request([f"bench.v{i}"], validate_only=True),
            ),
            (
                "IncrementalAlterConfigs validate_only, 1 topic (warm cache)",
                lambda i, h: alter_request(topic, 3_600_000 * h, validate_only=True),
            ),
            (
                "IncrementalAlterConfigs, 1 topic (each one changes it)",
                lambda i, h: alter_request(topic, 3_600_000 * h, validate_only=False),
            ),
        )
        offsets = {name: n for n, name in enumerate(paths)}
        for label, make in phases:
            for i in range(args.samples):
                for name, client in rotated(paths, i):
                    # Each path sets its own values, so every real alter changes something.
                    ms, response = timed(client, make(i, 2 + 10 * offsets[name] + i % 5))
                    results_of = getattr(response, "topics", None) or response.responses
                    codes = [r.error_code.value for r in results_of]
                    assert codes == [0], (name, label, codes)
                    results[name].setdefault(label, []).append(ms)
        for b in range(args.batches):
            names = [f"bench.b{b}-{n}" if n % 2 else f"Bench_B{b}_{n}" for n in range(1000)]
            for name, client in rotated(paths, b):
                ms, response = timed(client, create_request(names, validate_only=True))
                errors = sum(1 for t in response.topics if t.error_code.value == 44)
                assert errors == (0 if name == "direct" else 500), errors
                label = "CreateTopics validate_only, 1,000 topics, half denied by the proxy"
                results[name].setdefault(label, []).append(ms)
    finally:
        for client in paths.values():
            client.close()
        for proxy in proxies.values():
            proxy.stop()
    for name in proxies:
        print(f"\n{name}:")
        print(
            f"| request | direct p50 ms | {name} p50 ms | added p50 ms | direct p99 ms "
            f"| {name} p99 ms |"
        )
        print("|---|---|---|---|---|---|")
        for label in results["direct"]:
            d, p = results["direct"][label], results[name][label]
            q = [statistics.quantiles(x, n=100) for x in (d, p)] if len(d) >= 100 else None
            p99 = f"{q[0][98]:.2f} | {q[1][98]:.2f}" if q else "n/a | n/a"
            print(
                f"| {label} | {statistics.median(d):.2f} | {statistics.median(p):.2f} | "
                f"+{statistics.median(p) - statistics.median(d):.2f} | {p99} |"
            )


if __name__ == "__main__":
    main()
