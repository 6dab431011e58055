"""Replay's Python per request, without Spark: a lake's events judged in Arrow batches.

Run from the repository's root, on a lake that `pipeline ingest` wrote:

    .venv/bin/python -m bench.replay_python_bench LAKE --policy POLICY [--snapshot S]
        [--events N] [--batch 10000] [--runs 3] [--profile text|typed|cached]

The lake's event files are read with pyarrow (the columns replay hands its UDF) and judged
in batches as the replay's UDF judges them, in the same run three ways:

- `text`: every request's JSON text read and judged, one by one (the replay before the typed
  columns: `Replayer.replay`);
- `typed`: from the typed columns, every request judged (the cache emptied before each row);
- `cached`: from the typed columns, each distinct request of a task judged once
  (`BatchJudge`), with the cache's hit rate.

It prints the median µs per request of each, and with `--profile` the top of a cProfile of
one of them.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
import pyarrow.dataset as ds  # type: ignore[import-untyped]

from kafka_policy_proxy.pipeline.jobs.replay_batches import EPOCH, BatchJudge
from kafka_policy_proxy.pipeline.jobs.replay_evaluation import RESULT, replay_batch
from kafka_policy_proxy.pipeline.jobs.replayer import Replayer
from kafka_policy_proxy.pipeline.sources.typed_requests import TYPED_REQUEST_COLUMN
from kafka_policy_proxy.pipeline.worker_cache import compiled
from kafka_policy_proxy.policy.offline.snapshot_format import parse_snapshot


def batches(lake: Path, events: int, size: int) -> list[pa.RecordBatch]:
    """The lake's first `events` events as the UDF gets them: typed, text, micros, in_use."""
    table = ds.dataset(lake / "table=events", format="parquet", partitioning="hive")
    columns = ["request", "time", "in_use"]
    typed = TYPED_REQUEST_COLUMN in table.schema.names
    read = table.head(events, columns=[*columns, *([TYPED_REQUEST_COLUMN] if typed else [])])
    micros = pc.cast(pc.cast(read["time"], pa.timestamp("us", "UTC")), pa.int64())
    arrays = {
        "typed": read[TYPED_REQUEST_COLUMN] if typed else pa.nulls(read.num_rows),
        "text": read["request"],
        "micros": micros,
        "in_use": read["in_use"],
    }
    whole = pa.table(arrays).combine_chunks()
    return whole.to_batches(max_chunksize=size)


def run_text(replayer: Replayer, work: list[pa.RecordBatch]) -> None:
    """The replay before typed columns: each text read and judged (its UDF's loop)."""
    for batch in work:
        rows = []
        times, used = batch["micros"].to_pylist(), batch["in_use"].to_pylist()
        for text, us, facts in zip(batch["text"].to_pylist(), times, used, strict=True):
            moment = None if us is None else EPOCH + timedelta(microseconds=us)
            rows.append(replayer.replay(text, moment, facts))
        columns = [list(c) for c in zip(*rows, strict=True)]
        fields = list(RESULT)[:5]
        pa.StructArray.from_arrays(
            [pa.array(c, f.type) for c, f in zip(columns, fields, strict=True)], fields=fields
        )


def run_typed(replayer: Replayer, work: list[pa.RecordBatch], size: int) -> BatchJudge:
    """From the typed columns (text where none), with a cache of `size` (0: none)."""
    judge = BatchJudge(replayer, size=size)
    for batch in work:
        typed = batch["typed"]
        texts = pc.if_else(pc.is_null(typed), batch["text"], pa.scalar(None, pa.string()))
        replay_batch(judge, typed, texts, batch["micros"], batch["in_use"])
    return judge


def main() -> int:
    """Time the three ways; print µs per request (and a profile if asked)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lake", type=Path)
    parser.add_argument("--policy", type=Path, required=True)
    parser.add_argument("--snapshot", type=Path)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", choices=["text", "typed", "cached"])
    args = parser.parse_args()
    work = batches(args.lake, args.events, args.batch)
    count = sum(b.num_rows for b in work)
    policy = compiled(args.policy.read_text(), str(args.policy))
    snapshot = None if args.snapshot is None else args.snapshot.read_text().splitlines()
    cluster = None if snapshot is None else parse_snapshot(snapshot).cluster

    def replayer() -> Replayer:
        return Replayer(policy, cluster)

    ways: dict[str, Callable[[], object]] = {
        "text": lambda: run_text(replayer(), work),
        "typed": lambda: run_typed(replayer(), work, 0),
        "cached": lambda: run_typed(replayer(), work, 65_536),
    }
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(ways[args.profile])
        pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(25)
        return 0
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(args.runs):  # alternating, so that the machine's noise hits each alike
        for name, way in ways.items():
            started = time.perf_counter()
            way()
            times[name].append(time.perf_counter() - started)
    judge = run_typed(replayer(), work, 65_536)
    print(f"{count:,} events from {args.lake}, batches of {args.batch:,}")
    for name, runs in times.items():
        print(f"{name}: {statistics.median(runs) / count * 1e6:.1f} µs per request")
    rate = judge.hits / judge.lookups
    print(f"cache: {judge.lookups:,} lookups, {judge.hits:,} hits ({rate:.1%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
