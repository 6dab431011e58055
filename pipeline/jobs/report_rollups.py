"""The report's input: the rollups of its window, summed across batches, collected to the driver
in one small Spark job per rollup table.

From a lake, the rollups its batches committed (`pipeline.sources.lake_rollups`), pruned by
date partition, then kept exactly by hour (or day); without a window, the topics come from the
batches' totals (a row per key, not per key and day). A batch ingested before rollups existed
has its rollups derived from its events, with a warning. From raw files (a one-off run), the
rollups are derived from the events.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from kafka_policy_proxy.pipeline.sources.audit_source import AuditSource
from kafka_policy_proxy.pipeline.sources.hadoop_files import exists, read_tasks
from kafka_policy_proxy.pipeline.sources.lake import committed, read_lake
from kafka_policy_proxy.pipeline.sources.lake_rollups import (
    BUDGETS,
    HOURS,
    LINES,
    ROLLUPS,
    TOPIC_KEYS,
    TOPIC_TOTALS,
    TOPICS,
    VERSION,
    VERSIONS,
    WAIVERS,
    by_example,
    rollups,
)

Rows = list[dict[str, Any]]
_TIMES = {HOURS: "hour", TOPICS: "day", WAIVERS: "day", BUDGETS: "day"}


@dataclass(frozen=True)
class Window:
    """The report's time window, [since, until): rows are kept by the start of their hour
    (per-hour rollups) or day (per-day ones); None is open."""

    since: datetime | None = None
    until: datetime | None = None

    @property
    def bounded(self) -> bool:
        """Whether either end is set."""
        return self.since is not None or self.until is not None

    def keeps(self, column: str) -> Column:
        """Whether a row of a per-`hour` or per-`day` rollup is in the window."""
        kept = F.lit(True)
        if self.since is not None:
            since = self.since.astimezone(UTC)
            start: date | datetime = (
                since.replace(minute=0, second=0, microsecond=0)
                if column == "hour"
                else since.date()
            )
            kept &= F.col(column) >= F.lit(start)
        if self.until is not None:
            until = self.until.astimezone(UTC)
            end: date | datetime = until if column == "hour" else (until - _TICK).date()
            kept &= F.col(column) < F.lit(end) if column == "hour" else F.col(column) <= F.lit(end)
        return kept

    def dates(self) -> Column:
        """Whether a date partition can hold rows in the window (pruning, before `keeps`)."""
        kept = F.lit(True)
        if self.since is not None:
            kept &= F.col("date") >= F.lit(self.since.astimezone(UTC).date())
        if self.until is not None:
            kept &= F.col("date") <= F.lit((self.until.astimezone(UTC) - _TICK).date())
        return kept


_TICK = timedelta(microseconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def collect_rollups(
    spark: SparkSession, source: AuditSource, window: Window
) -> tuple[dict[str, Rows], list[str]]:
    """Each rollup table over the window, summed across batches on Spark and collected; and
    the warnings (batches whose rollups were derived from their events)."""
    frames, warnings = _frames(spark, source, window)
    return {name: _collect(name, frame) for name, frame in frames.items()}, warnings


def _frames(
    spark: SparkSession, source: AuditSource, window: Window
) -> tuple[dict[str, DataFrame | None], list[str]]:
    if source.lake is None:
        audit = source.read(spark, with_request=False)
        return _windowed(rollups(audit.lines), window), []
    lake = source.lake.rstrip("/")
    batches = committed(spark, lake)
    if not batches:
        raise FileNotFoundError(f"{lake}: no ingested batch (run `pipeline ingest` first)")
    kept = [b["batch"] for b in batches if b.get("rollups") in VERSIONS]
    older = [b["batch"] for b in batches if b.get("rollups") not in VERSIONS]
    totals = [b["batch"] for b in batches if b.get("rollups") == VERSION]
    frames = {
        name: (
            _topics(spark, lake, [b for b in kept if b not in totals], totals)
            if name == TOPICS and not window.bounded
            else _stored(spark, lake, name, kept, window)
        )
        for name in ROLLUPS
    }
    if not older:
        return frames, []
    warning = (
        f"{len(older):,} batch(es) of the lake were ingested before rollups were kept "
        f"(from {older[0]} to {older[-1]}): their rollups were derived from their events, "
        "which is slower"
    )
    derived = rollups(read_lake(spark, lake, with_request=False, batches=older).lines)
    for name, frame in _windowed(derived, window).items():
        stored = frames[name]
        if frame is not None:
            frames[name] = (
                frame if stored is None else stored.unionByName(frame.select(*stored.columns))
            )
    return frames, [warning]


def _stored(
    spark: SparkSession, lake: str, name: str, batches: list[str], window: Window
) -> DataFrame | None:
    """The rollup `name` of the committed `batches`, pruned to the window's dates."""
    path = f"{lake}/table={name}"
    if not batches or not exists(spark, path) or (name == LINES and window.bounded):
        return None
    table = spark.read.option("basePath", lake).parquet(path)
    table = table.where(F.col("batch").isin(*batches))
    if name in _TIMES:
        table = table.where(window.dates() & window.keeps(_TIMES[name]))
    return table.drop("table", "date", "batch").coalesce(read_tasks(spark, [path]))


def _topics(spark: SparkSession, lake: str, days: list[str], totals: list[str]) -> DataFrame | None:
    """The topic rollup of the whole lake: the batches' totals, and the day rows of those
    batches that have none (rollups version 1)."""
    window = Window()
    frames = [
        frame.select(*TOPIC_KEYS, "events", "first_seen", "last_seen", "example")
        for frame in (
            _stored(spark, lake, TOPIC_TOTALS, totals, window),
            _stored(spark, lake, TOPICS, days, window),
        )
        if frame is not None
    ]
    return frames[0].unionByName(frames[1]) if len(frames) == 2 else next(iter(frames), None)


def _windowed(derived: dict[str, DataFrame], window: Window) -> dict[str, DataFrame | None]:
    # Bad lines have no time: a report over a window leaves them out.
    return {
        name: (
            None
            if name == LINES and window.bounded
            else frame.where(window.keeps(_TIMES[name]))
            if name in _TIMES
            else frame
        )
        for name, frame in derived.items()
    }


def _sums(*columns: str) -> list[Column]:
    return [F.sum(c).alias(c) for c in columns]


def _seen() -> list[Column]:
    return [F.min("first_seen").alias("first_seen"), F.max("last_seen").alias("last_seen")]


def _collect(name: str, frame: DataFrame | None) -> Rows:
    """The rollup summed over batches (and the finer keys the report does not show)."""
    if frame is None:
        return []
    keys: tuple[str, ...]
    if name == HOURS:
        keys = ("hour", "action", "decision", "principal", "rule", "rule_mode")
        summed = frame.groupBy(*keys).agg(*_sums("events", "records"), *_seen())
        return _rows(summed, ("hour", "first_seen", "last_seen"))
    if name == TOPICS:
        return _rows(
            by_example(frame, ("topic", "principal", "decision", "rule", "rule_mode"), "example")
        )
    if name == WAIVERS:
        keys = ("exception", "rule", "ticket", "expires", "principal")
        summed = frame.groupBy(*keys).agg(*_sums("events"), F.max("last_seen").alias("last_seen"))
        return _rows(summed, ("last_seen",))
    if name == BUDGETS:
        latest = F.max_by(F.struct("unit", "limit", "usage", "added"), F.col("last_seen"))
        summed = frame.groupBy("budget").agg(
            latest.alias("b"), *_sums("events"), F.max("last_seen").alias("last_seen")
        )
        return _rows(summed.select("budget", "b.*", "events", "last_seen"), ("last_seen",))
    first = F.min_by(F.col("sample"), F.col("first_line"))
    summed = frame.groupBy("source", "kind", "problem").agg(
        *_sums("lines"), F.min("first_line").alias("first_line"), first.alias("sample")
    )
    return _rows(summed, ())


def _rows(df: DataFrame, times: Sequence[str] = ("first_seen", "last_seen")) -> Rows:
    """The rows as dicts, through Arrow (a fraction of the cost of `collect` for the topic
    rollup's ~100,000 rows); the timestamp columns `times` as UTC datetimes."""
    # Timestamps travel as epoch microseconds: collected, they would take the driver's zone.
    selected = df.select(
        *(F.unix_micros(F.col(c)).alias(c) if c in times else F.col(c) for c in df.columns)
    )
    rows: Rows = selected.toArrow().to_pylist()
    for row in rows:
        for column in times:
            if row[column] is not None:
                row[column] = _EPOCH + timedelta(microseconds=row[column])
    return rows
