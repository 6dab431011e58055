"""What a budget adds to a create: p50 of real CreateTopics direct, through a proxy whose budget
counts the topic, and through the same proxy policy without the budget, in one run.

Usage: python -m bench.budget_latency [--samples N] [--runs R]
Starts its own cluster (ports 25850-25989) and two proxies (25800+, 25830+); each request goes
over one raw connection per path (harness/wire.py), the paths take turns in a rotating order,
and every create is checked allowed. The budget's create holds its turn (a fresh all-topics
Metadata, the broker's answer); the other reads only the broker defaults fresh.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench.admin_latency import create_request, rotated, timed
from harness.local_kafka import LocalKafka
from harness.proxy_process import ProxyProcess
from harness.wire import WireClient

RULES = """\
version: 1
rules:
  - name: replication
    replication: {min: 3}
"""
BUDGET = """\
budgets:
  - name: bench-budget
    topic_prefix: bench.
    max_topics: 100000
    max_partitions: 1000000
"""


def main() -> None:
    """Run the cluster and both proxies; print the table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=100, help="creates per path and run")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kpp-budget-bench-"))
    kafka = LocalKafka(work / "cluster", brokers=3, port_base=25850, port_stride=20)
    kafka.up(timeout=180)
    try:
        run(kafka, work, args)
    finally:
        kafka.down()


def run(kafka: Any, work: Path, args: argparse.Namespace) -> None:
    """Measure each path, alternating, for `runs` runs; print the median of the runs' p50s."""
    proxies = {}
    for name, port, text in (("no budget", 25800, RULES), ("budget", 25830, RULES + BUDGET)):
        folder = work / name.replace(" ", "-")
        folder.mkdir()
        (folder / "policy.yaml").write_text(text)
        extra = {"policy": {"file": str(folder / "policy.yaml")}}
        proxies[name] = ProxyProcess(folder, kafka.bootstrap_servers, port, port + 10, extra)
    host, port = kafka.bootstrap_servers.split(",")[0].split(":")
    paths = {"direct": WireClient(host, int(port), timeout=120)}
    for name, proxy in proxies.items():
        paths[name] = WireClient("127.0.0.1", proxy.bootstrap_port, timeout=120)
    medians: dict[str, list[float]] = {p: [] for p in paths}
    try:
        for r in range(args.runs):
            samples: dict[str, list[float]] = {p: [] for p in paths}
            for i in range(args.samples):
                for n, (name, client) in enumerate(rotated(paths, i)):
                    topic = f"bench.r{r}-{i}-{n}"
                    ms, response = timed(client, create_request([topic], validate_only=False))
                    codes = [t.error_code.value for t in response.topics]
                    assert codes == [0], (name, topic, codes)
                    samples[name].append(ms)
            for name, values in samples.items():
                medians[name].append(statistics.median(values))
    finally:
        for client in paths.values():
            client.close()
        for proxy in proxies.values():
            proxy.stop()
    direct = statistics.median(medians["direct"])
    print("| path | p50 ms (median of runs) | added over direct | runs' p50s |")
    print("|---|---|---|---|")
    for name, values in medians.items():
        p50 = statistics.median(values)
        runs = ", ".join(f"{v:.2f}" for v in values)
        print(f"| {name} | {p50:.2f} | +{p50 - direct:.2f} | {runs} |")


if __name__ == "__main__":
    main()
