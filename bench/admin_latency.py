"""Admin request latency, direct and through the enforcing proxy (examples/policy.yaml), one run.

Usage: python -m bench.admin_latency [--samples N] [--batches N] [--baseline TREE]
                                    [--port-base P] [--profile FILE]
Starts its own cluster (ports P..P+69, P = 24092 unless given) and proxy (P+70..P+73);
requests go over one raw connection each (harness/wire.py), so client overhead is the same on
both paths. `--baseline TREE` also runs the proxy of another checkout (P+80..P+83) with the
same policy, in the same rotation. `--profile FILE` samples this proxy with py-spy during the
1,000-topic batches (raw folded stacks).
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness.local_kafka import LocalKafka
from harness.messages import build
from harness.proxy_process import ProxyProcess
from harness.wire import WireClient
from kafka_policy_proxy.codec.registry import request_class

REPO = Path(__file__).resolve().parents[1]
# Each kind of broker listener takes a block of this many ports (3 brokers need 3 of them).
PORT_STRIDE = 10


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
    parser.add_argument("--port-base", type=int, default=24092)
    parser.add_argument("--profile", type=Path, help="py-spy's raw stacks of the proxy, batches")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kpp-admin-bench-"))
    args.work = work
    kafka = LocalKafka(
        work / "cluster", brokers=3, port_base=args.port_base, port_stride=PORT_STRIDE
    )
    kafka.up(timeout=180)
    try:
        run(kafka, args)
    finally:
        kafka.down()


def run(kafka: Any, args: argparse.Namespace) -> None:
    """Measure with a proxy in front of the running cluster."""
    policy = {"policy": {"file": str(REPO / "examples" / "policy.yaml")}}
    proxy_port = args.port_base + 7 * PORT_STRIDE
    proxies = {
        "proxy": ProxyProcess(args.work, kafka.bootstrap_servers, proxy_port, proxy_port, policy)
    }
    if args.baseline is not None:
        # The other checkout's proxy, run from this venv with that tree first on the path.
        workdir = args.work / "baseline"
        workdir.mkdir()
        env = {"PYTHONPATH": str(args.baseline.resolve())}
        port = proxy_port + 10
        proxies["baseline"] = ProxyProcess(
            workdir, kafka.bootstrap_servers, port, port, policy, env=env
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
        with sampled(proxies["proxy"].process.pid, args.profile):
            pids = {name: proxy.process.pid for name, proxy in proxies.items()}
            batches(paths, args.batches, results, pids)
    finally:
        for client in paths.values():
            client.close()
        for proxy in proxies.values():
            proxy.stop()
    report(results, list(proxies))


@contextmanager
def sampled(pid: int, out: Path | None) -> Iterator[None]:
    """py-spy records the process (the thread holding the GIL: where its CPU goes) while the
    block runs (nothing if `out` is None)."""
    if out is None:
        yield
        return
    spy = Path(sys.executable).parent / "py-spy"
    command = [str(spy), "record", "--pid", str(pid), "-r", "200", "--gil", "-f", "raw"]
    command += ["-o", str(out)]
    recorder = subprocess.Popen(command)
    time.sleep(1)  # py-spy attaches before the first batch
    try:
        yield
    finally:
        recorder.send_signal(signal.SIGINT)
        recorder.wait(60)


def batches(
    paths: dict[str, WireClient],
    count: int,
    results: dict[str, dict[str, list[float]]],
    pids: dict[str, int],
) -> None:
    """The 1,000-topic CreateTopics, half denied, on every path in turn; each proxy's CPU
    time per batch is printed (the mean: the kernel counts in 10 ms ticks), which a busy
    machine moves far less than latency."""
    label = "CreateTopics validate_only, 1,000 topics, half denied by the proxy"
    cpu = dict.fromkeys(pids, 0.0)
    for b in range(count):
        names = [f"bench.b{b}-{n}" if n % 2 else f"Bench_B{b}_{n}" for n in range(1000)]
        for name, client in rotated(paths, b):
            before = cpu_seconds(pids[name]) if name in pids else 0.0
            ms, response = timed(client, create_request(names, validate_only=True))
            if name in pids:
                cpu[name] += cpu_seconds(pids[name]) - before
            errors = sum(1 for t in response.topics if t.error_code.value == 44)
            assert errors == (0 if name == "direct" else 500), errors
            results[name].setdefault(label, []).append(ms)
    for name, seconds in cpu.items():
        print(f"{name}: {seconds / max(count, 1) * 1000:.1f} ms CPU per batch (mean of {count})")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process has used (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def report(results: dict[str, dict[str, list[float]]], proxies: list[str]) -> None:
    """One Markdown table: each path's p50 and what each proxy adds to direct's."""
    head = "| request | direct p50 ms |"
    for name in proxies:
        head += f" {name} p50 ms | {name} added p50 ms |"
    head += " direct p99 ms | proxy p99 ms |"
    print(head)
    print("|---" * head.count(" |") + "|")
    for label, direct in results["direct"].items():
        d = statistics.median(direct)
        row = f"| {label} | {d:.2f} |"
        for name in proxies:
            p = statistics.median(results[name][label])
            row += f" {p:.2f} | {p - d:+.2f} |"
        if len(direct) >= 100:
            q = [statistics.quantiles(x, n=100)[98] for x in (direct, results["proxy"][label])]
            row += f" {q[0]:.2f} | {q[1]:.2f} |"
        else:
            row += " n/a | n/a |"
        print(row)


if __name__ == "__main__":
    main()
