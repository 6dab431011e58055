"""The judge's added time per decision for a policy's exceptions: 0, 10 and 100 of them.

Run: .venv/bin/python -m bench.exceptions_bench [--decisions 20000] [--runs 7]
Each decision is one topic through the one judge (`Judgement` then `decide`) with the example
policy, at a fixed `now`, in three workloads: `denied` (a create over partition-count, from a
principal no exception selects: every exception is checked against it), `waived` (the same
create, selected by the last exception: the worst case that then waives) and `allowed` (a
compliant create: nothing to waive, the exceptions are not looked at). The exceptions select by
principal and topic prefix and waive partition-count; all but the last select someone else.
Prints the median microseconds per decision over the runs, and the difference to 0 exceptions;
then the exceptions' own step alone (`Exceptions.apply` on the decided request), the fastest of
the runs, which a loaded machine disturbs less.
"""

from __future__ import annotations

import argparse
import statistics
import time
import timeit
from datetime import UTC, datetime
from typing import Any

import yaml

from bench.policy_bench import cluster
from harness import REPO
from kafka_policy_proxy.policy import builders
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.judge import Facts, Judgement
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.policy.model import Principal, TopicRequest

NOW = datetime(2027, 1, 1, tzinfo=UTC)
COUNTS = (0, 10, 100)


def policy(count: int) -> CompiledPolicy:
    """The example policy with `count` exceptions; the last selects User:loader."""
    document: dict[str, Any] = yaml.safe_load((REPO / "examples/policy.yaml").read_text())
    document["exceptions"] = [
        {
            "name": f"exception-{i}",
            "match": {
                "principals": ["User:loader" if i == count - 1 else f"User:team-{i}"],
                "topic_prefix": "clicks.",
                "actions": ["create"],
            },
            "waive": ["partition-count"],
            "reason": "bench",
            "expires": "2030-01-01T00:00:00Z",
        }
        for i in range(count)
    ]
    return load_policy(document, "bench")


def requests() -> dict[str, TopicRequest]:
    """One request per workload."""
    return {
        "allowed": builders.create_request("clicks.raw", 12, 3, principal=Principal("User:a")),
        "denied": builders.create_request("clicks.raw", 96, 3, principal=Principal("User:a")),
        "waived": builders.create_request("clicks.raw", 96, 3, principal=Principal("User:loader")),
    }


def per_decision(compiled: CompiledPolicy, request: TopicRequest, decisions: int) -> float:
    """Microseconds per decision through the judge."""
    state = cluster()
    batch = (request,)
    started = time.perf_counter()
    for _ in range(decisions):
        judgement = Judgement(compiled, batch, now=NOW)
        judgement.decide(Facts(state, judgement.query.facts))
    return (time.perf_counter() - started) / decisions * 1e6


def main() -> None:
    """Print the median µs per decision by workload and number of exceptions."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--decisions", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    compiled = {count: policy(count) for count in COUNTS}
    for workload, request in requests().items():
        samples: dict[int, list[float]] = {count: [] for count in COUNTS}
        for _ in range(args.runs):  # interleaved, so that drift hits every count alike
            for count in COUNTS:
                samples[count].append(per_decision(compiled[count], request, args.decisions))
        medians = {count: statistics.median(values) for count, values in samples.items()}
        decision = _decision(compiled[COUNTS[-1]], request)
        cells = ", ".join(
            f"{count}: {medians[count]:.2f} µs ({medians[count] - medians[0]:+.2f})"
            for count in COUNTS
        )
        print(f"{workload:8} ({decision}) {cells}")
    for workload, request in requests().items():
        alone = ", ".join(
            f"{count}: {_apply_alone(compiled[count], request, args):.2f} µs" for count in COUNTS
        )
        print(f"{workload:8} apply() alone: {alone}")


def _apply_alone(
    compiled: CompiledPolicy, request: TopicRequest, args: argparse.Namespace
) -> float:
    """The fastest run's µs per `Exceptions.apply` on the decision without exceptions."""
    judgement = Judgement(compiled, (request,))
    (verdict,) = judgement.decide(Facts(cluster(), judgement.query.facts))
    decision = verdict.decision
    assert decision is not None
    apply = compiled.exceptions.apply
    best = min(
        timeit.repeat(
            lambda: apply(verdict.request, decision, NOW), number=args.decisions, repeat=args.runs
        )
    )
    return best / args.decisions * 1e6


def _decision(compiled: CompiledPolicy, request: TopicRequest) -> str:
    judgement = Judgement(compiled, (request,), now=NOW)
    (verdict,) = judgement.decide(Facts(cluster(), judgement.query.facts))
    assert verdict.decision is not None
    waived = "waived" if verdict.decision.waived else "none waived"
    return f"{'allowed' if verdict.decision.allowed else 'denied'}, {waived}"


if __name__ == "__main__":
    main()
