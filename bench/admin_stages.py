"""Where a 1,000-topic CreateTopics goes in process: the topic policy filter and its hook.

Run: .venv/bin/python -m bench.admin_stages [--runs 15] [--topics 1000] [--total-only]
                                           [--compare TREE --rounds N]
`TopicPolicyFilter.on_request` and its response hook, as the proxy runs them, on a
CreateTopics v7 validate_only request of `--topics` topics (3 partitions, RF 3,
min.insync.replicas=2; every other name breaks examples/policy.yaml's naming rule), the
cluster state in memory and no audit sink. The broker's answer to the forwarded half is built
as a Kafka 4.1 broker's is (each result with the topic's 38 effective configs, about 1.2 KB).
Each stage is the time spent in the functions the filter calls for it (wrapped here); the
figures are medians of `--runs` runs in CPU time. `--total-only` prints one line, whole-path
medians only, and wraps nothing, so that it runs on an older tree too (PYTHONPATH=tree).
`--compare TREE` runs `--total-only` in subprocesses, `--rounds` times, alternating between
this tree and TREE (e.g. the previous commit's, extracted with `git archive`), and prints each
tree's median of the round medians.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import logging
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Collection
from pathlib import Path
from typing import Any

import structlog

from bench.admin_latency import create_request
from harness.messages import build
from kafka_policy_proxy.codec.framing import framed
from kafka_policy_proxy.codec.header import peek_request_header, request_header
from kafka_policy_proxy.codec.registry import encode, response_class
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.policy.model import ConfigMap
from kafka_policy_proxy.proxy.audit.recorder import DecisionRecorder
from kafka_policy_proxy.proxy.cluster.live_facts import LiveFacts
from kafka_policy_proxy.proxy.filters import topic_policy
from kafka_policy_proxy.proxy.filters.api import RequestContext
from kafka_policy_proxy.proxy.filters.topic_policy import TopicPolicyFilter

ROOT = Path(__file__).resolve().parents[1]
# The effective configs a Kafka 4.1 broker lists for a new topic (validate_only included).
TOPIC_CONFIGS = {
    "cleanup.policy": "delete",
    "compression.gzip.level": "-1",
    "compression.lz4.level": "9",
    "compression.type": "producer",
    "compression.zstd.level": "3",
    "delete.retention.ms": "86400000",
    "file.delete.delay.ms": "60000",
    "flush.messages": "9223372036854775807",
    "flush.ms": "9223372036854775807",
    "follower.replication.throttled.replicas": "",
    "index.interval.bytes": "4096",
    "leader.replication.throttled.replicas": "",
    "local.retention.bytes": "-2",
    "local.retention.ms": "-2",
    "max.compaction.lag.ms": "9223372036854775807",
    "max.message.bytes": "1048588",
    "message.timestamp.after.max.ms": "3600000",
    "message.timestamp.before.max.ms": "9223372036854775807",
    "message.timestamp.type": "CreateTime",
    "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0",
    "min.insync.replicas": "2",
    "preallocate": "false",
    "remote.log.copy.disable": "false",
    "remote.log.delete.on.disable": "false",
    "remote.storage.enable": "false",
    "retention.bytes": "-1",
    "retention.ms": "604800000",
    "segment.bytes": "1073741824",
    "segment.index.bytes": "10485760",
    "segment.jitter.ms": "0",
    "segment.ms": "604800000",
    "unclean.leader.election.enable": "false",
    "message.downconversion.enable": "true",
    "message.format.version": "3.0-IV1",
    "message.timestamp.difference.max.ms": "9223372036854775807",
    "min.insync.replicas.override": "",
    "segment.bytes.override": "",
}


class MemoryReader:
    """The cluster-state reader's interface, answered from memory (a warm cache)."""

    def __init__(self, cluster: InMemoryCluster) -> None:
        self.cluster = cluster

    async def snapshot(
        self, facts: Any, topics: Any = (), topic_ids: Any = (), **_: Any
    ) -> InMemoryCluster:
        return self.cluster

    async def usage(self, topics: Collection[str], max_groups: int) -> dict[str, Any]:
        return {}

    def mark(self) -> int:
        return 0

    def unknown_ids(self, ids: Collection[str]) -> set[str]:
        return set()

    def known_ids(self, ids: Collection[str]) -> set[str]:
        return set()

    def invalidate(self, topic: str) -> None:
        pass


def batch_names(count: int) -> list[str]:
    """Every other name breaks the naming rule (as bench/admin_latency.py's batch)."""
    return [f"bench.b0-{n}" if n % 2 else f"Bench_B0_{n}" for n in range(count)]


def request_frame(names: list[str]) -> bytes:
    """A CreateTopics v7 validate_only request frame for these topics."""
    return framed(request_header(19, 7, 7, "bench"), encode(create_request(names, True)))


def broker_answer(names: list[str]) -> bytes:
    """The broker's CreateTopics v7 answer for these topics, configs listed as a broker does."""
    cls = response_class(19, 7)
    m = importlib.import_module(cls.__module__)
    configs = tuple(
        build(
            m.CreatableTopicConfigs,
            name=k,
            value=v,
            read_only=False,
            config_source=5 if k != "min.insync.replicas" else 1,
            is_sensitive=False,
        )
        for k, v in TOPIC_CONFIGS.items()
    )
    results = tuple(
        build(
            m.CreatableTopicResult,
            name=n,
            topic_id=None,
            error_code=0,
            error_message=None,
            topic_config_error_code=0,
            num_partitions=3,
            replication_factor=3,
            configs=configs,
        )
        for n in names
    )
    return encode(build(cls, throttle_time=0, topics=results))


def filter_under_test() -> TopicPolicyFilter:
    """The filter over examples/policy.yaml, a 3-broker cluster in memory, no audit sink."""
    path = ROOT / "examples" / "policy.yaml"
    policy = load_policy(path.read_text(), str(path), base_dir=path.parent)
    # The broker's defaults as the cluster-state reader holds them: every topic config.
    defaults = ConfigMap({**TOPIC_CONFIGS, "min.insync.replicas": "1"})
    cluster = InMemoryCluster(brokers=3, defaults=defaults)
    facts = LiveFacts(MemoryReader(cluster), ())  # type: ignore[arg-type]
    recorder = DecisionRecorder([], proxy_id="bench", cluster_id=lambda: "c1")
    return TopicPolicyFilter(lambda: policy, facts, recorder, -1)


def context(frame: bytes) -> RequestContext:
    """The context the filter gets for the frame, from a client at 10.0.0.7."""
    header = peek_request_header(frame, 4)
    return RequestContext(1, "bootstrap", "10.0.0.7:50000", "User:alice", header, frame)


def one_pass(
    loop: asyncio.AbstractEventLoop, flt: TopicPolicyFilter, frame: bytes, answer: bytes
) -> tuple[float, bytes]:
    """CPU seconds for on_request plus the hook on the broker's answer; the client's answer."""
    ctx = context(frame)
    start = time.process_time()
    verdict = loop.run_until_complete(flt.on_request(ctx))
    merged = verdict.hook(answer)
    return time.process_time() - start, merged


class Stages:
    """Wraps named functions and sums the CPU time spent in each during a pass."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = defaultdict(float)
        self._depth = 0

    def wrap(self, owner: Any, attr: str, label: str) -> None:
        """Time every call of owner.attr under `label` (outermost wrapped call only)."""
        inner = getattr(owner, attr)

        def timed(*args: Any, **kwargs: Any) -> Any:
            if self._depth:
                return inner(*args, **kwargs)
            self._depth += 1
            start = time.process_time()
            try:
                return inner(*args, **kwargs)
            finally:
                self.spent[label] += time.process_time() - start
                self._depth -= 1

        setattr(owner, attr, timed)


def stage_points() -> list[tuple[Any, str, str]]:
    """(object, attribute, stage): the calls the filter makes, by stage, those this tree has."""
    from kafka_policy_proxy.codec.guarded.create_topics import CreateTopics
    from kafka_policy_proxy.policy.judge import Judgement

    points = [
        (CreateTopics, "decode_request", "decode the request"),
        (CreateTopics, "topic_items", "per-topic views of the entries"),
        (CreateTopics, "decode_response", "decode the broker's answer"),
        (CreateTopics, "split", "split out the denials"),
        (CreateTopics, "merge", "merge the answer"),
        (CreateTopics, "merge_body", "merge the answer"),
        (CreateTopics, "forward_body", "the forwarded request's bytes"),
        (Judgement, "decide", "judge (rules over the facts)"),
        (Judgement, "__init__", "judge (which facts to read)"),
        (DecisionRecorder, "record", "record: counters and the log line"),
        (topic_policy, "topic_request", "build the policy requests"),
        (topic_policy, "encode", "the forwarded request's bytes"),
    ]
    return [(owner, attr, label) for owner, attr, label in points if hasattr(owner, attr)]


def main() -> None:
    """Print the total and each stage's median, in ms."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--total-only", action="store_true")
    parser.add_argument("--compare", type=Path, help="another tree, timed in turn with this one")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.compare is not None:
        compare(args)
        return
    # Log lines go nowhere, but they are rendered as the proxy renders them.
    structlog.configure(
        processors=[structlog.processors.JSONRenderer()],
        logger_factory=structlog.PrintLoggerFactory(open("/dev/null", "w")),  # noqa: SIM115
    )
    logging.disable(logging.CRITICAL)
    names = batch_names(args.topics)
    frame = request_frame(names)
    answer = broker_answer(names[1::2])
    flt = filter_under_test()
    stages = Stages()
    if not args.total_only:
        for owner, attr, label in stage_points():
            stages.wrap(owner, attr, label)
    loop = asyncio.new_event_loop()
    one_pass(loop, flt, frame, answer)  # warm the caches the codecs build once
    totals: list[float] = []
    per_stage: dict[str, list[float]] = defaultdict(list)
    for _ in range(args.runs):
        stages.spent.clear()
        gc.collect()
        spent, merged = one_pass(loop, flt, frame, answer)
        totals.append(spent)
        for label, seconds in stages.spent.items():
            per_stage[label].append(seconds)
    print(f"total ms: {statistics.median(totals) * 1000:.1f}  (answer {len(merged)} bytes)")
    if args.total_only:
        return
    print("| stage | ms |\n|---|---|")
    for label, values in sorted(per_stage.items(), key=lambda kv: -statistics.median(kv[1])):
        print(f"| {label} | {statistics.median(values) * 1000:.1f} |")
    accounted = sum(statistics.median(v) for v in per_stage.values())
    print(f"| the rest | {(statistics.median(totals) - accounted) * 1000:.1f} |")


def compare(args: argparse.Namespace) -> None:
    """This tree and another, timed in alternating subprocesses: each one's median."""
    trees = {"this tree": ROOT, str(args.compare): args.compare.resolve()}
    totals: dict[str, list[float]] = {name: [] for name in trees}
    script = Path(__file__).resolve()
    for round_ in range(args.rounds):
        for name, tree in list(trees.items())[:: 1 if round_ % 2 == 0 else -1]:
            command = [sys.executable, str(script), "--total-only", "--runs", str(args.runs)]
            command += ["--topics", str(args.topics)]
            env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{ROOT}"}
            out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
            totals[name].append(float(out.stdout.split()[2]))
    for name, values in totals.items():
        print(f"{name}: {statistics.median(values):.1f} ms (rounds: {values})")


if __name__ == "__main__":
    main()
