"""Policy engine throughput: single-topic evaluations against examples/policy.yaml.

Run: .venv/bin/python -m bench.policy_bench [--evaluations 1000000] [--runs 5] [--hostile]
                                            [--judge | --java]
Requests are built and resolved up front (the proxy does that once per topic); only
`evaluate()` is timed, on one core. `--judge` times the whole path every entry point takes
instead: the one judge (`policy.judge.Judgement`) on each unresolved request, one topic per
batch, asking for its facts and folding them in before evaluating. `--java` times
examples/java-policy's ReferencePolicy (compiled with javac, run through JPype) against its
YAML rewrite, on the creates and config changes of the workload (all a Java policy sees).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path
from typing import TypeVar

from harness import REPO
from kafka_policy_proxy.policy import builders
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.judge import Facts, Judgement
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.policy.model import (
    Action,
    Fact,
    Principal,
    TopicRequest,
)
from kafka_policy_proxy.policy.offline.scenario import parse_suite

T = TypeVar("T")
PRINCIPALS = ["User:alice", "User:bob", "User:platform-admin", "User:streams-payments"]
DOMAINS = ["orders", "payments", "shipping", "inventory", "billing"]


def cluster() -> InMemoryCluster:
    """The cluster described by the example test suite."""
    return parse_suite((REPO / "examples/policy-tests.yaml").read_text()).cluster.build()


def workload(
    count: int, hostile: bool = False, seed: int = 7, *, resolved: bool = True
) -> list[TopicRequest]:
    """Creates, config changes, partition increases and deletes, each on a distinct topic name.

    The default mix is mostly compliant, as admin traffic is; `hostile` takes each value out
    of bounds half of the time, so most topics are denied and get messages.
    """
    rng = random.Random(seed)
    bad = 0.5 if hostile else 0.04
    state = cluster()

    def pick(good: list[T], wrong: list[T]) -> T:
        return rng.choice(wrong) if rng.random() < bad else rng.choice(good)

    requests = []
    for i in range(count):
        who = Principal(rng.choice(PRINCIPALS), f"client-{i % 50}", "10.0.0.1")
        name = f"{pick(DOMAINS, ['Legacy', 'payments-ledger'])}.events-{i}"
        kind = rng.random()
        request: TopicRequest
        if kind < 0.5:
            retention = pick([3_600_000, 604_800_000, 2_592_000_000], [60_000, 7_776_000_000])
            configs = [
                ("retention.ms", str(retention)),
                ("min.insync.replicas", str(pick([2, 3], [1]))),
            ]
            partitions, replication = pick([3, 6, 12, 24], [1, 64]), pick([3], [1, 5])
            request = builders.create_request(
                name, partitions, replication, None, configs, principal=who
            )
        elif kind < 0.75:
            retention = pick([86_400_000, 604_800_000], [9**12])
            request = builders.incremental_alter_configs_request(
                "orders.v1", [("retention.ms", "SET", str(retention))], principal=who
            )
        elif kind < 0.9:
            count_after = pick([16, 24, 36], [48])
            request = builders.create_partitions_request("orders.v1", count_after, principal=who)
        else:
            target = pick(["orders.v1", name], ["payments.settlements"])
            request = builders.delete_topic_request(target, principal=who)
        requests.append(builders.resolve(request, state, frozenset(Fact)) if resolved else request)
    return requests


def run(
    policy: CompiledPolicy, requests: list[TopicRequest], evaluations: int
) -> tuple[float, float]:
    """Evaluate `evaluations` requests (cycling the workload); topics/s by wall and CPU time.

    On a shared machine the wall-clock rate measures the run queue as much as the engine;
    the CPU-time rate is what one core delivers when the process has it.
    """
    state = cluster()
    evaluate = policy.evaluate
    rounds, rest = divmod(evaluations, len(requests))
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(rounds):
        for request in requests:
            evaluate(request, state)
    for request in requests[:rest]:
        evaluate(request, state)
    return evaluations / (time.perf_counter() - wall), evaluations / (time.process_time() - cpu)


def run_judge(
    policy: CompiledPolicy, requests: list[TopicRequest], evaluations: int
) -> tuple[float, float]:
    """As `run`, through the one judge: query, facts folded in, evaluate; one topic a batch."""
    state = cluster()
    rounds, rest = divmod(evaluations, len(requests))
    batch = [requests] * rounds + [requests[:rest]]
    wall, cpu = time.perf_counter(), time.process_time()
    for chunk in batch:
        for request in chunk:
            judgement = Judgement(policy, (request,))
            judgement.decide(Facts(state, judgement.query.facts))
    return evaluations / (time.perf_counter() - wall), evaluations / (time.process_time() - cpu)


def main() -> None:
    """Print topics/s per run and the median."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--evaluations", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--distinct", type=int, default=10_000, help="distinct requests cycled")
    parser.add_argument("--hostile", action="store_true", help="mostly out-of-policy requests")
    parser.add_argument("--judge", action="store_true", help="time the judge, not evaluate()")
    parser.add_argument("--java", action="store_true", help="a Java policy against its YAML")
    args = parser.parse_args()
    if args.java:
        java_comparison(args)
        return
    policy = load_policy((REPO / "examples/policy.yaml").read_text(), "examples/policy.yaml")
    requests = workload(args.distinct, args.hostile, resolved=not args.judge)
    state = cluster()
    facts = frozenset(Fact)
    denied = sum(
        not policy.evaluate(builders.resolve(r, state, facts), state).allowed for r in requests
    )
    mix = "hostile" if args.hostile else "typical"
    print(
        f"policy: {len(policy.rule_names)} rules; workload ({mix}): {len(requests):,} distinct "
        f"requests, {denied / len(requests):.0%} denied"
    )
    walls, cpus = [], []
    for i in range(args.runs):
        wall, cpu = (run_judge if args.judge else run)(policy, requests, args.evaluations)
        walls.append(wall)
        cpus.append(cpu)
        print(
            f"run {i + 1}: {args.evaluations:,} evaluations, {wall:,.0f} topics/s wall, "
            f"{cpu:,.0f} topics/s CPU"
        )
    print(
        f"median: {statistics.median(walls):,.0f} topics/s wall, "
        f"{statistics.median(cpus):,.0f} topics/s CPU (one core)"
    )


def java_comparison(args: argparse.Namespace) -> None:
    """Microseconds per topic: the reference Java policy and its YAML rewrite, alternating."""
    import tempfile

    from harness.java_policies import REFERENCE_CLASS, build_jar, kafka_clients_jar

    requests = [
        r
        for r in workload(args.distinct, args.hostile)
        if r.action is Action.CREATE
        or (r.alter_kind is not None and r.alter_kind.value == "configs")
    ]
    with tempfile.TemporaryDirectory() as work:
        jar = build_jar(Path(work) / "reference-policy.jar")
        java_text = (
            "version: 1\nrules:\n  - name: broker-policy\n    java_policy:\n"
            f"      jar: {jar}\n      class: {REFERENCE_CLASS}\n"
            f"      classpath: [{kafka_clients_jar()}]\n"
            "      config: {policy.max.partitions: 6}\n"  # as the YAML rewrite's bound
        )
        yaml_file = REPO / "examples/java-policy/equivalent-policy.yaml"
        policies = {
            "java": load_policy(java_text, "java"),
            "yaml": load_policy(yaml_file.read_text(), str(yaml_file)),
        }
        state = cluster()
        verdicts = {
            name: [policy.evaluate(r, state).allowed for r in requests]
            for name, policy in policies.items()
        }
        agree = sum(a == b for a, b in zip(verdicts["java"], verdicts["yaml"], strict=True))
        print(
            f"{len(requests):,} creates and config changes, {verdicts['java'].count(False):,} "
            f"denied; the two policies agree on {agree:,}"
        )
        costs: dict[str, list[float]] = {name: [] for name in policies}
        for i in range(args.runs):
            for name, policy in policies.items():
                _, rate = run(policy, requests, args.evaluations)
                costs[name].append(1e6 / rate)
                print(f"run {i + 1} {name}: {1e6 / rate:.2f} us CPU per topic")
        for name, values in costs.items():
            print(f"median {name}: {statistics.median(values):.2f} us CPU per topic")
        for policy in policies.values():
            policy.close()


if __name__ == "__main__":
    main()
