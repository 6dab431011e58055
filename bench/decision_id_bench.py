"""What decision ids in answers add per decision: minting a UUIDv7, and the message's suffix.

Run: .venv/bin/python -m bench.decision_id_bench [--count 200000] [--runs 7]

Times, on one core, per call (the median of `--runs` runs of `--count` calls each):
- `uuid4().hex`: the id the recorder minted before, and only when an audit sink was enabled;
- `new_decision_id()`: the UUIDv7 minted now for every decision, sink or not;
- `cite(message, id)`: the ` (decision <id>)` a denial message ends with;
- the two together, as a denied decision pays them.
With a sink, a decision pays the new id instead of the old one; without one it pays it on top;
a denial also pays the suffix. Compare with an admin request's own cost through the proxy
(`bench.admin_latency`): milliseconds.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable

from kafka_policy_proxy.policy.decision_ids import cite, new_decision_id

MESSAGE = "[partition-count] topic 'orders.events' asks for 64 partitions; the limit is 48"


def per_call_ns(run: Callable[[], object], count: int, runs: int) -> float:
    """The median over `runs` of the time per call of `run`, in nanoseconds."""
    samples = []
    for _ in range(runs):
        start = time.perf_counter_ns()
        for _ in range(count):
            run()
        samples.append((time.perf_counter_ns() - start) / count)
    return statistics.median(samples)


def main() -> None:
    """Print one line per measured step."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    minted = new_decision_id()
    steps: dict[str, Callable[[], object]] = {
        "uuid4().hex (before)": lambda: uuid.uuid4().hex,
        "new_decision_id() (UUIDv7)": new_decision_id,
        "cite(message, id)": lambda: cite(MESSAGE, minted),
        "new_decision_id() + cite": lambda: cite(MESSAGE, new_decision_id()),
    }
    print(f"per call, median of {args.runs} runs x {args.count:,} calls")
    for name, step in steps.items():
        print(f"{name:32} {per_call_ns(step, args.count, args.runs) / 1000:6.2f} us")


if __name__ == "__main__":
    main()
