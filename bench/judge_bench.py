"""The one judge's cost per topic, as the proxy and the replay call it.

Run: .venv/bin/python -m bench.judge_bench [--requests 5000] [--runs 5] [--topics 1000]
                                           [--compare REV]
Single-topic requests (creates, config changes, partition increases, deletes) from seven
principals against examples/policy.yaml (its exception, budgets and in-use rule present) and a
cluster of `--topics` topics besides the example suite's (a budget counts those it scopes).
Each path judges the whole workload once per run, timed in CPU time on one core; the figure is
the median of the runs, µs per topic:
- `evaluate`: `CompiledPolicy.evaluate` alone on the requests as the proxy resolved them;
- `proxy xN`: `Judgement(policy, batch, now=...)`, `ClusterFacts(cluster).read(query)`,
  `decide`, in batches of N topics (N = 1, 100, 1,000), as the proxy judges a request;
- `replay`: one recorded request at a time, `Judgement` + `RecordedFacts(request, snapshot)`
  + `decide`, as `pipeline replay` judges an audit event.
Each path also prints a digest of its decisions, so two trees can be shown to decide alike.
`--compare REV` extracts that git revision into a temporary directory (with this script
copied in) and runs the two trees in alternating subprocesses, then prints both medians.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from kafka_policy_proxy.policy import builders
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.judge import ClusterFacts, FactsNotRecorded, Judgement, Verdict
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.policy.model import Principal, TopicRequest, TopicState
from kafka_policy_proxy.policy.offline.recorded_facts import RecordedFacts
from kafka_policy_proxy.policy.offline.scenario import parse_suite

ROOT = Path(__file__).resolve().parents[1]
NOW = datetime(2026, 11, 29, 3, 0, tzinfo=UTC)
DOMAINS = ["orders", "shipping", "inventory", "billing", "payments", "events", "metrics"]
# (principal, weight): applications, operators, the platform team, a Streams app, two teams
# under a per-team budget, and the loader the example's exception waives partition-count for.
PRINCIPALS = [
    ("User:alice", 30),
    ("User:bob", 20),
    ("User:platform-admin", 10),
    ("User:streams-payments", 10),
    ("User:team-a", 10),
    ("User:team-b", 10),
    ("User:analytics-loader", 10),
]
BATCHES = (1, 100, 1000)


def cluster(extra: int = 1000, seed: int = 11) -> InMemoryCluster:
    """The example suite's cluster plus `extra` topics over the domains and two team prefixes."""
    suite = parse_suite((ROOT / "examples/policy-tests.yaml").read_text()).cluster.build()
    rng = random.Random(seed)
    topics = list(suite.topics)
    for i in range(extra):
        domain = rng.choice([*DOMAINS, "team-a", "team-b"] if i % 20 == 0 else DOMAINS)
        topics.append(
            TopicState(
                f"{domain}.dataset-{i}",
                topic_id=f"id-{i}",
                partitions=rng.choice([3, 6, 12]),
                replication_factor=3,
                configs=suite.defaults,
            )
        )
    return InMemoryCluster.of(topics, suite.brokers, suite.defaults, suite.usage)


def workload(count: int, state: InMemoryCluster, seed: int = 7) -> list[TopicRequest]:
    """Unresolved single-topic requests, as the proxy builds them from the wire (4% bad values).

    40% creates of new names, 25% incremental config changes, 15% partition increases and 20%
    deletes, of existing topics (a few of them shipping topics the in-use rule reads).
    """
    rng = random.Random(seed)
    names = sorted(state.topic_names())
    people = [p for p, _ in PRINCIPALS]
    weights = [w for _, w in PRINCIPALS]
    requests: list[TopicRequest] = []
    for i in range(count):
        who_name = rng.choices(people, weights)[0]
        who = Principal(who_name, f"client-{i % 40}", "10.0.0.1")
        bad = rng.random() < 0.04
        kind = rng.random()
        if kind < 0.4:
            if who_name.startswith("User:team-"):
                name = f"{who_name[5:]}.new-{i}"
            elif who_name == "User:analytics-loader":
                name = f"clicks.new-{i}"
            elif who_name == "User:streams-payments":
                name = f"payments-ledger-store-{i}-changelog"
            else:
                name = f"{rng.choice(DOMAINS)}.new-{i}" if not bad else f"Legacy_{i}"
            partitions = 96 if who_name == "User:analytics-loader" else rng.choice([3, 6, 12])
            configs = [
                ("retention.ms", "60000" if bad else rng.choice(["86400000", "604800000"])),
                ("min.insync.replicas", "2"),
            ]
            requests.append(
                builders.create_request(name, partitions, 3, None, configs, principal=who)
            )
        elif kind < 0.65:
            retention = "9" * 13 if bad else rng.choice(["86400000", "604800000"])
            requests.append(
                builders.incremental_alter_configs_request(
                    rng.choice(names), [("retention.ms", "SET", retention)], principal=who
                )
            )
        elif kind < 0.8:
            topic = rng.choice(names)
            current = state.topic(topic)
            assert current is not None
            grow = 60 if bad else 3
            requests.append(
                builders.create_partitions_request(topic, current.partitions + grow, principal=who)
            )
        else:
            topic = rng.choice(["shipping.live", "shipping.archive"]) if i % 10 == 0 else None
            requests.append(
                builders.delete_topic_request(topic or rng.choice(names), principal=who)
            )
    return requests


def proxy(
    policy: CompiledPolicy, batch: Sequence[TopicRequest], facts: ClusterFacts
) -> list[Verdict]:
    """One request's topics as the proxy judges them (its live cache is a cluster in memory)."""
    judgement = Judgement(policy, batch, now=NOW)
    return judgement.decide(facts.read(judgement.query))


def replay(
    policy: CompiledPolicy, request: TopicRequest, snapshot: InMemoryCluster
) -> list[Verdict]:
    """One recorded request as the replay judges it (`pipeline/jobs/replayer.py`)."""
    judgement = Judgement(policy, (request,), now=NOW)
    try:
        facts = RecordedFacts(request, snapshot).read(judgement.query)
    except FactsNotRecorded:
        return []
    return judgement.decide(facts)


def digest(verdicts: Sequence[Verdict]) -> str:
    """A short hash of every decision and judged request."""
    h = hashlib.sha256()
    for v in verdicts:
        decision = None if v.decision is None else v.decision.to_dict()
        h.update(json.dumps([v.request.to_dict(), decision, v.reason], sort_keys=True).encode())
    return h.hexdigest()[:12]


def timed(fn: Callable[[], list[Verdict]], topics: int) -> tuple[float, list[Verdict]]:
    """µs of CPU per topic for one call of `fn` (after a collection: runs start alike)."""
    gc.collect()
    start = time.process_time()
    verdicts = fn()
    return (time.process_time() - start) * 1e6 / topics, verdicts


def measure(count: int, runs: int, topics: int) -> dict[str, object]:
    """Every path's per-run µs per topic, and the digest of its decisions."""
    policy = load_policy((ROOT / "examples/policy.yaml").read_text(), "examples/policy.yaml")
    state = cluster(topics)
    facts = ClusterFacts(state)
    requests = workload(count, state)
    # What the proxy recorded: each request with the facts it was judged with folded in.
    recorded = [v.request for r in requests for v in proxy(policy, (r,), facts)]
    denied = sum(
        not v.decision.allowed
        for r in requests
        for v in proxy(policy, (r,), facts)
        if v.decision is not None
    )
    paths: dict[str, Callable[[], list[Verdict]]] = {
        "evaluate": lambda: [Verdict(r, policy.evaluate(r, state)) for r in recorded if r.name],
        **{
            f"proxy x{n}": (
                lambda n=n: [
                    v for i in range(0, count, n) for v in proxy(policy, requests[i : i + n], facts)
                ]
            )
            for n in BATCHES
        },
        "replay": lambda: [v for r in recorded for v in replay(policy, r, state)],
    }
    times: dict[str, list[float]] = {name: [] for name in paths}
    digests: dict[str, str] = {}
    for _ in range(runs):
        for name, fn in paths.items():
            cost, verdicts = timed(fn, count)
            times[name].append(cost)
            digests[name] = digest(verdicts)
    return {"requests": count, "denied": denied, "times": times, "digests": digests}


def compare(rev: str, count: int, runs: int, topics: int) -> None:
    """The tree at `rev` against this one, in alternating subprocesses, one run each."""
    here = Path(__file__).resolve()
    results: dict[str, dict[str, list[float]]] = {}
    digests: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as work:
        base = Path(work) / "base"
        base.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
        shutil.copy(here, base / "bench" / here.name)
        trees = {rev: base, "this tree": ROOT}
        for i in range(runs):
            for label, tree in (trees if i % 2 == 0 else dict(reversed(trees.items()))).items():
                env = {**os.environ, "PYTHONPATH": str(tree)}
                out = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "bench.judge_bench",
                        "--json",
                        "--runs",
                        "1",
                        "--requests",
                        str(count),
                        "--topics",
                        str(topics),
                    ],
                    cwd=tree,
                    env=env,
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
                data = json.loads(out)
                for name, values in data["times"].items():
                    results.setdefault(label, {}).setdefault(name, []).extend(values)
                digests[label] = data["digests"]
                print(
                    f"run {i + 1} {label}: "
                    + ", ".join(f"{n} {v[0]:.1f}" for n, v in data["times"].items()),
                    flush=True,
                )
    print(
        f"\nµs CPU per topic, median of {runs} alternating runs ({count:,} requests each, "
        f"{topics:,} topics besides the example's):"
    )
    print(f"| path | {rev} | this tree | change |")
    print("|---|---|---|---|")
    for name in results[rev]:
        before = statistics.median(results[rev][name])
        after = statistics.median(results["this tree"][name])
        print(f"| {name} | {before:.1f} | {after:.1f} | {after / before - 1:+.0%} |")
    same = digests[rev] == digests["this tree"]
    print("decisions identical in both trees" if same else f"DECISIONS DIFFER: {digests}")


def main() -> None:
    """Print µs per topic per path (or JSON with --json), or compare with a revision."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--topics", type=int, default=1000, help="topics besides the example's")
    parser.add_argument("--compare", metavar="REV", help="alternate with this git revision")
    parser.add_argument("--json", action="store_true", help="print the raw runs as JSON")
    args = parser.parse_args()
    if args.compare:
        compare(args.compare, args.requests, args.runs, args.topics)
        return
    result = measure(args.requests, args.runs, args.topics)
    if args.json:
        print(json.dumps(result))
        return
    print(f"{result['requests']:,} single-topic requests, {result['denied']:,} denied")
    times = result["times"]
    assert isinstance(times, dict)
    for name, values in times.items():
        print(
            f"{name:>12}: median {statistics.median(values):6.1f} µs CPU per topic "
            f"(runs {', '.join(f'{v:.1f}' for v in values)})"
        )


if __name__ == "__main__":
    main()
