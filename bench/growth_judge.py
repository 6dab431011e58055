"""The one judge's CPU per topic for a batch of 1, 100, 1,000 and 10,000 topics.

Usage: python -m bench.growth_judge [--batches 1,100,1000,10000] [--topics 10000] [--runs 5]
                                    [--chart docs/growth-judge.png]
As the proxy judges a request (bench/judge_bench.py's `proxy` path: `Judgement`,
`ClusterFacts.read`, `decide`) against examples/policy.yaml and the example suite's cluster
plus 1,000 topics. At each batch size, `--topics` topics are judged in batches of that size,
so every point does the same work:
- `creates`: one principal's CreateTopics of new topics under the example's team budget
  (`User:team-a`, prefix `team-a.`: the batch sees its own names, and each topic is counted
  against the budget after the ones before it), 4% with a retention the rules deny;
- `mixed`: bench/judge_bench.py's workload (creates, config changes, partition increases,
  deletes from seven principals), cut into batches.
Each figure is the median of `--runs`, in µs of CPU per topic.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

from bench.growth_chart import draw
from bench.judge_bench import ROOT, cluster, proxy, workload
from kafka_policy_proxy.policy import builders
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.judge import ClusterFacts
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.policy.model import Principal, TopicRequest


def creates(count: int) -> list[TopicRequest]:
    """`count` creates of new team-a topics, from team-a."""
    who = Principal("User:team-a", "bench", "10.0.0.1")
    return [
        builders.create_request(
            f"team-a.new-{i}",
            3,
            3,
            None,
            [
                ("retention.ms", "60000" if i % 25 == 0 else "86400000"),
                ("min.insync.replicas", "2"),
            ],
            principal=who,
        )
        for i in range(count)
    ]


def per_topic(
    policy: CompiledPolicy, requests: Sequence[TopicRequest], facts: ClusterFacts, batch: int
) -> tuple[float, int]:
    """µs of CPU per topic to judge `requests` in batches of `batch`, and how many were denied."""
    gc.collect()
    start = time.process_time()
    verdicts = [
        v
        for i in range(0, len(requests), batch)
        for v in proxy(policy, requests[i : i + batch], facts)
    ]
    elapsed = time.process_time() - start
    denied = sum(v.decision is not None and not v.decision.allowed for v in verdicts)
    return elapsed * 1e6 / len(requests), denied


def measure(batches: list[int], topics: int, runs: int) -> dict[str, list[dict[str, float]]]:
    """Per workload, per batch size: the median µs per topic and the topics denied."""
    policy = load_policy((ROOT / "examples/policy.yaml").read_text(), "examples/policy.yaml")
    state = cluster(1000)
    facts = ClusterFacts(state)
    workloads = {"creates": creates(topics), "mixed": workload(topics, state)}
    result: dict[str, list[dict[str, float]]] = {name: [] for name in workloads}
    for name, requests in workloads.items():
        for batch in batches:
            times, denied = [], 0
            for _ in range(runs):
                cost, denied = per_topic(policy, requests, facts, batch)
                times.append(cost)
            result[name].append({"batch": batch, "us": statistics.median(times), "denied": denied})
    return result


def main() -> None:
    """Print the table and draw the chart."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", default="1,100,1000,10000")
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--chart", type=Path, default=Path("docs/growth-judge.png"))
    args = parser.parse_args()
    result = measure([int(b) for b in args.batches.split(",")], args.topics, args.runs)
    print(f"{args.topics:,} topics judged per run, in batches; µs CPU per topic (median)")
    print("| batch | creates µs/topic | creates denied | mixed µs/topic | mixed denied |")
    print("|---|---|---|---|---|")
    for create, mixed in zip(result["creates"], result["mixed"], strict=True):
        print(
            f"| {create['batch']:,.0f} | {create['us']:.1f} | {create['denied']:,.0f} "
            f"| {mixed['us']:.1f} | {mixed['denied']:,.0f} |"
        )
    draw(
        args.chart,
        "The judge's CPU per topic as the batch grows",
        "topics per request (batch)",
        "µs CPU per topic (median)",
        {name: [(r["batch"], r["us"]) for r in rows] for name, rows in result.items()},
        guide="creates",
        slope=0,
    )
    print(f"chart: {args.chart}")


if __name__ == "__main__":
    main()
