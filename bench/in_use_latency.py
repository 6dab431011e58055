"""What the in-use check adds to a delete, on a cluster with 1,000 consumer groups.

Usage: python -m bench.in_use_latency [--samples N] [--groups N]
Starts its own 3-broker cluster on the integration tests' ports (29092+: not during a test run) and
two proxies (26200+ and 26220+): one enforces an `in_use` rule on `bench.` topics, the other
the same policy without it. First `--groups` consumer groups commit an offset (on a topic of
their own, no live members: the check must still list and fetch them all); then each sample
creates a fresh empty topic directly and deletes it through one proxy, the two taking turns.
Every delete is checked (allowed) and timed over one raw connection per path.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from bench.admin_latency import create_request, timed
from harness.local_kafka import LocalKafka
from harness.messages import build
from harness.proxy_process import ProxyProcess
from harness.wire import WireClient
from kafka_policy_proxy.codec.registry import request_class

IN_USE = {"written_within": "15m", "consumed_within": "15m", "max_groups": 5000}
RULES = {
    "in-use check": [
        {
            "name": "in-use",
            "match": {"topic_prefix": "bench.", "actions": ["delete"]},
            "in_use": IN_USE,
        }
    ],
    "no check": [
        {"name": "elsewhere", "match": {"topic_prefix": "zz.", "actions": ["delete"]}, "deny": True}
    ],
}


def delete_request(name: str) -> Any:
    """DeleteTopics v6 of one topic, by name."""
    cls = request_class(20, 6)
    m = importlib.import_module(cls.__module__)
    return build(cls, topics=(build(m.DeleteTopicState, name=name, topic_id=None),), timeout=60_000)


def commit_groups(bootstrap: str, count: int) -> None:
    """`count` groups with one committed offset each, on a topic of their own."""
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce("groups.home", b"x")
    producer.flush(30)

    def commit(n: int) -> None:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-group-{n}"})
        for attempt in range(50):  # a coordinator may still be loading or moving
            try:
                consumer.commit(offsets=[TopicPartition("groups.home", 0, 1)], asynchronous=False)
                break
            except KafkaException:
                if attempt == 49:
                    raise
                time.sleep(0.2)
        consumer.close()

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(commit, range(count)))


def main() -> None:
    """Measure both proxies, alternating, and print a Markdown row per path."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--groups", type=int, default=1000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kpp-in-use-bench-"))
    kafka = LocalKafka(work / "cluster", brokers=3, port_base=29092, light_jvm=True)
    kafka.up(timeout=180)
    proxies: dict[str, ProxyProcess] = {}
    try:
        for n, (label, rules) in enumerate(RULES.items()):
            (work / f"proxy-{n}").mkdir()
            policy = work / f"policy-{n}.yaml"
            policy.write_text(yaml.safe_dump({"version": 1, "rules": rules}))
            proxies[label] = ProxyProcess(
                work / f"proxy-{n}",
                kafka.bootstrap_servers,
                26200 + 20 * n,
                26210 + 20 * n,
                {"policy": {"file": str(policy)}},
            )
        run(kafka, proxies, args)
    finally:
        for proxy in proxies.values():
            proxy.stop()
        kafka.down()


def run(kafka: Any, proxies: dict[str, ProxyProcess], args: argparse.Namespace) -> None:
    """Commit the groups, then time deletes through each proxy in turn."""
    host, port = kafka.bootstrap_servers.split(",")[0].split(":")
    direct = WireClient(host, int(port), timeout=120)
    direct.request(create_request(["groups.home"], validate_only=False))
    started = time.monotonic()
    commit_groups(kafka.bootstrap_servers, args.groups)
    print(f"{args.groups} groups committed in {time.monotonic() - started:.1f} s")
    paths = {
        label: WireClient("127.0.0.1", p.bootstrap_port, timeout=120)
        for label, p in proxies.items()
    }
    results: dict[str, list[float]] = {label: [] for label in paths}
    try:
        for i in range(args.samples):
            order = list(paths.items())
            for label, client in order[i % 2 :] + order[: i % 2]:
                name = f"bench.del-{i}-{len(results[label])}-{label[:2]}"
                made = direct.request(create_request([name], validate_only=False))
                assert [t.error_code.value for t in made.topics] == [0], made
                time.sleep(0.5)  # the new topic reaches every broker's metadata
                ms, response = timed(client, delete_request(name))
                codes = [(r.error_code.value, r.error_message) for r in response.responses]
                assert codes == [(0, None)], (label, codes)
                results[label].append(ms)
    finally:
        direct.close()
        for client in paths.values():
            client.close()
    print("| delete through the proxy | p50 ms | p90 ms |")
    print("|---|---|---|")
    for label, times in results.items():
        deciles = statistics.quantiles(times, n=10)
        print(f"| {label} | {statistics.median(times):.2f} | {deciles[8]:.2f} |")
    added = statistics.median(results["in-use check"]) - statistics.median(results["no check"])
    print(f"added p50: +{added:.2f} ms with {args.groups} groups")


if __name__ == "__main__":
    main()
