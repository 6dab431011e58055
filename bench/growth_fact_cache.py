"""The fact cache at 1k, 10k and 100k topics: memory, lookup, a forwarded change, the collector.

Usage: python -m bench.growth_fact_cache [--topics 1000,10000,100000] [--runs 5]
                                         [--requests 60000] [--chart docs/growth-fact-cache.png]
The cache (proxy/cluster/fact_cache.py) is filled as the reader fills it
(proxy/cluster/fetches.py): the all-topics listing (each topic's partitions and replicas, no
configs), and every topic by name with its 35 effective configs (fresh strings, as decoded).
Per size:
- memory: tracemalloc's growth while the listing, then the named entries, are built and
  stored, in bytes per topic;
- lookup: ns per `cached(name_key(name), now)` of a random held topic;
- change: µs per `invalidate(name)` (what the proxy does for each topic of a change it
  forwarded), the topic stored again between calls so the cache keeps its size;
- collector: how long one full collection takes while the cache is held, and the µs per
  request the automatic collections take in a loop of `--requests` requests (three lookups and
  a few short-lived objects each; one in 20 stores a topic read again), the listing read again
  three times, with the collector as it is and with the cache frozen out of it after each
  listing is stored (`gc.freeze`, as pipeline/worker_cache.py does).
Times are CPU time, medians of `--runs`.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time
import tracemalloc
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from bench.growth_chart import draw
from kafka_policy_proxy.policy.model import ConfigMap, TopicState, freeze_assignment
from kafka_policy_proxy.proxy.cluster.fact_cache import ALL_TOPICS, FactCache, name_key

CONFIGS = [(f"topic.config.{i}", str(86_400_000 + i)) for i in range(35)]


def fresh(text: str) -> str:
    """A new string object, as a decoder makes one per response."""
    return (text + " ")[:-1]


def listing(topics: int) -> tuple[TopicState, ...]:
    """The all-topics listing: 3 partitions on 3 replicas each, no configs."""
    return tuple(
        TopicState(
            fresh(f"orders.dataset-{i}"),
            topic_id=f"{i:032x}",
            partitions=3,
            replication_factor=3,
            assignment=freeze_assignment((p, (1, 2, 3)) for p in range(3)),
        )
        for i in range(topics)
    )


def named(state: TopicState) -> TopicState:
    """A topic as read by name: its effective configs and its overrides."""
    return TopicState(
        state.name,
        topic_id=state.topic_id,
        partitions=state.partitions,
        replication_factor=state.replication_factor,
        assignment=state.assignment,
        configs=ConfigMap((fresh(k), fresh(v)) for k, v in CONFIGS),
        overrides=frozenset({fresh("retention.ms")}),
    )


def filled(topics: int) -> tuple[FactCache[Any], tuple[TopicState, ...], int, int]:
    """A cache holding the listing and every topic by name, and the bytes each took."""
    gc.collect()
    tracemalloc.start()
    cache: FactCache[Any] = FactCache(ttl_s=3600.0)
    states = listing(topics)
    cache.fill({ALL_TOPICS: (states, 3)}, 0.0, cache.generation)
    after_listing = tracemalloc.get_traced_memory()[0]
    cache.fill({name_key(s.name): named(s) for s in states}, 0.0, cache.generation)
    after_named = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return cache, states, after_listing, after_named - after_listing


def cpu(fn: Callable[[], object]) -> float:
    """CPU seconds for one call."""
    start = time.process_time()
    fn()
    return time.process_time() - start


def lookups(cache: FactCache[Any], states: tuple[TopicState, ...], count: int) -> float:
    """ns per lookup of a random held topic."""
    rng = random.Random(3)
    names = [states[rng.randrange(len(states))].name for _ in range(count)]

    def run() -> None:
        for name in names:
            cache.cached(name_key(name), 1.0)

    return cpu(run) / count * 1e9


def changes(cache: FactCache[Any], states: tuple[TopicState, ...], count: int) -> float:
    """µs per invalidation of a held topic (stored again after each, untimed)."""
    total = 0.0
    for state in random.Random(5).sample(states, count):
        total += cpu(partial(cache.invalidate, state.name))
        cache.fill({name_key(state.name): named(state)}, 0.0, cache.generation)
    return total / count * 1e6


class Collections:
    """Time spent in full (generation 2) collections, from the collector's callbacks."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.count = 0
        self._began = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._began = time.process_time()
        else:
            self.seconds += time.process_time() - self._began
            self.count += 1


def requests(
    cache: FactCache[Any], states: tuple[TopicState, ...], freeze: bool, count: int
) -> tuple[float, int]:
    """µs per request spent in full collections, and how many ran, over `count` requests."""
    rng = random.Random(7)
    seen = Collections()
    gc.collect()
    if freeze:
        gc.freeze()
    gc.callbacks.append(seen)
    try:
        listing_every = max(count // 3, 1)
        for i in range(count):
            keys = [name_key(states[rng.randrange(len(states))].name) for _ in range(3)]
            found = [cache.cached(k, 1.0) for k in keys]
            context = {"keys": keys, "found": found, "verdicts": [[k] for k in keys]}
            del context
            if i % 20 == 0:
                state = states[rng.randrange(len(states))]
                cache.fill({name_key(state.name): named(state)}, 1.0, cache.generation)
            if i % listing_every == listing_every - 1:
                cache.fill({ALL_TOPICS: (listing(len(states)), 3)}, 1.0, cache.generation)
                if freeze:
                    gc.collect()
                    gc.freeze()
    finally:
        gc.callbacks.remove(seen)
        gc.unfreeze()
    return seen.seconds / count * 1e6, seen.count


def measure(sizes: list[int], runs: int, count: int) -> list[dict[str, float]]:
    """Every figure per size (medians of `runs`)."""
    rows = []
    for topics in sizes:
        cache, states, listing_bytes, named_bytes = filled(topics)
        samples: dict[str, list[float]] = {
            k: [] for k in ("lookup", "change", "full", "gc_as_is", "gc_frozen")
        }
        counts: dict[str, int] = {}
        for _ in range(runs):
            samples["lookup"].append(lookups(cache, states, 100_000))
            samples["change"].append(changes(cache, states, min(200, topics)))
            samples["full"].append(cpu(gc.collect) * 1e3)
            for name, freeze in (("gc_as_is", False), ("gc_frozen", True)):
                per_request, counts[name] = requests(cache, states, freeze, count)
                samples[name].append(per_request)
        rows.append(
            {
                "topics": topics,
                "listing_bytes": listing_bytes / topics,
                "named_bytes": named_bytes / topics,
                **{k: statistics.median(v) for k, v in samples.items()},
                "full_count_as_is": counts["gc_as_is"],
                "full_count_frozen": counts["gc_frozen"],
            }
        )
        del cache, states
    return rows


def main() -> None:
    """Print the table and draw the chart."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--topics", default="1000,10000,100000")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=60_000)
    parser.add_argument("--chart", type=Path, default=Path("docs/growth-fact-cache.png"))
    args = parser.parse_args()
    rows = measure([int(t) for t in args.topics.split(",")], args.runs, args.requests)
    print(
        "| topics | listing B/topic | by name B/topic | lookup ns | invalidate µs "
        "| full collection ms | collector µs/request (full collections): as is | frozen |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['topics']:,.0f} | {r['listing_bytes']:,.0f} | {r['named_bytes']:,.0f} "
            f"| {r['lookup']:,.0f} | {r['change']:,.1f} | {r['full']:,.1f} "
            f"| {r['gc_as_is']:.2f} ({r['full_count_as_is']:.0f}) "
            f"| {r['gc_frozen']:.2f} ({r['full_count_frozen']:.0f}) |"
        )
    draw(
        args.chart,
        "The fact cache as topics grow",
        "topics held",
        "per topic / per operation (median)",
        {
            "memory, KiB per topic": [
                (r["topics"], (r["listing_bytes"] + r["named_bytes"]) / 1024) for r in rows
            ],
            "lookup, µs": [(r["topics"], r["lookup"] / 1000) for r in rows],
            "invalidate, µs": [(r["topics"], r["change"]) for r in rows],
            "full collection, ms": [(r["topics"], r["full"]) for r in rows],
        },
        guide="full collection, ms",
    )
    print(f"chart: {args.chart}")


if __name__ == "__main__":
    main()
