"""Codec micro-benchmarks: header peek, a 1,000-topic CreateTopics v7 decode, split + merge.

Run: .venv/bin/python -m bench.codec_bench [--runs 5]
Each figure is the median over runs of the per-operation mean inside one run; the
machines are noisy, so compare medians, and the targets are checked here, never in tests.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from kafka_policy_proxy.codec.guarded import guarded_api
from kafka_policy_proxy.codec.guarded.base import element_class
from kafka_policy_proxy.codec.header import peek_request_header, request_body_offset, request_header
from kafka_policy_proxy.codec.registry import encode, request_class, response_class

CREATE_TOPICS = 19
VERSION = 7
TOPICS = 1_000
# Target per operation, in seconds.
TARGETS = {"header peek": 2e-6, "split + merge, half denied": 30e-3}


def _create_topics_request() -> Any:
    cls = request_class(CREATE_TOPICS, VERSION)
    topic_cls = element_class(cls, "topics")
    config_cls = element_class(topic_cls, "configs")
    topics = tuple(
        topic_cls(
            name=f"orders.region-{i:04d}",
            num_partitions=12,
            replication_factor=3,
            assignments=(),
            configs=(
                config_cls(name="retention.ms", value="604800000"),
                config_cls(name="cleanup.policy", value="delete"),
            ),
        )
        for i in range(TOPICS)
    )
    return cls(topics=topics, timeout=datetime.timedelta(seconds=30), validate_only=False)


def _broker_answer(forward: Any) -> Any:
    cls = response_class(CREATE_TOPICS, VERSION)
    result_cls = element_class(cls, "topics")
    results = tuple(
        result_cls(
            name=t.name,
            topic_id=uuid.uuid4(),
            error_code=ErrorCode.none,
            error_message=None,
            num_partitions=12,
            replication_factor=3,
            configs=(),
        )
        for t in forward.topics
    )
    return cls(throttle_time=datetime.timedelta(0), topics=results)


def _measure(operation: Callable[[], object], loops: int, runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(loops):
            operation()
        samples.append((time.perf_counter() - start) / loops)
    return statistics.median(samples)


def main() -> int:
    """Print one line per figure, and exit 1 if a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs

    api = guarded_api(CREATE_TOPICS)
    assert api is not None
    request = _create_topics_request()
    frame = request_header(CREATE_TOPICS, VERSION, 42, "bench-client") + encode(request)
    offset = request_body_offset(frame, peek_request_header(frame))
    body = frame[offset:]
    decoded = api.decode_request(VERSION, body)
    denied = {i: f"topic {i} violates naming" for i in range(0, TOPICS, 2)}
    plan = api.split(decoded, denied)
    answer = _broker_answer(plan.forward)
    answer_body = encode(answer)

    def split_and_merge() -> bytes:
        plan = api.split(decoded, denied)
        return api.merge(plan, answer)

    figures = {
        "header peek": _measure(lambda: peek_request_header(frame), 100_000, runs),
        f"decode CreateTopics v7, {TOPICS} topics ({len(body)} bytes)": _measure(
            lambda: api.decode_request(VERSION, body), 20, runs
        ),
        "split + merge, half denied": _measure(split_and_merge, 20, runs),
        "  of which split": _measure(lambda: api.split(decoded, denied), 20, runs),
        "decode the broker's answer (500 topics)": _measure(
            lambda: api.decode_response(VERSION, answer_body), 20, runs
        ),
    }
    missed = False
    for name, seconds in figures.items():
        target = TARGETS.get(name)
        verdict = ""
        if target is not None:
            ok = seconds < target
            missed |= not ok
            verdict = f"  (target < {_fmt(target)}: {'ok' if ok else 'MISSED'})"
        print(f"{name:<55} {_fmt(seconds):>10}{verdict}")
    return 1 if missed else 0


def _fmt(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.2f} µs"
    return f"{seconds * 1e3:.2f} ms"


if __name__ == "__main__":
    sys.exit(main())
