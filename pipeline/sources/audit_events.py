"""Reading the proxy's audit log (docs/audit-log.md): every line kept, typed exactly, or why not.

Each line is classified by `pipeline.sources.audit_lines.classify` (the one definition of a
bad line) and a good one is then parsed by Spark with the schema the record's owner publishes.
Every job reads its input through here, from the raw JSON lines or from the lake
(`pipeline.sources.lake`), and counts the lines with `line_summary`, so that ingest, report and
replay count alike.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.functions import arrow_udf
from pyspark.sql.types import StringType, StructField, StructType

from kafka_policy_proxy.pipeline.sources.audit_lines import (
    BLANK,
    KINDS,
    MALFORMED,
    SAMPLE_BYTES,
    UNKNOWN_VERSION,
    Problem,
    classify,
    classify_envelope,
    sample,
)
from kafka_policy_proxy.pipeline.sources.spark_schema import struct_type
from kafka_policy_proxy.pipeline.sources.typed_requests import (
    TYPED_REQUEST_COLUMN,
    with_typed_request,
)
from kafka_policy_proxy.policy.decision_log import (
    NOT_TOPIC_ACTIONS,
    Outcome,
    RecordedAction,
    ResourceType,
    json_schema,
)

TIME_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"

# Derived from the record's owner. `request` (and `rewritten`, what overrides made of it, and
# `in_use`, the in-use facts judged) are kept as the JSON text of the object; replay reads the
# request from its typed columns (TYPED_REQUEST_COLUMN, read from that text: see
# `pipeline.sources.typed_requests`), and the rare `in_use` from its text. A v1 event reads
# with the six v2 fields null.
AUDIT_SCHEMA = struct_type(
    json_schema(),
    {"request": StringType(), "rewritten": StringType(), "in_use": StringType()},
)
# Where each line came from and, for a bad one, why: `line` counts from 1 in its file; `kind`
# is one of audit_lines.KINDS and `problem` the reason (both null for a good event); `sample`
# is the bad line's first 200 bytes.
LINE_COLUMNS = ("source", "line", "kind", "problem", "sample")
# Spark's own column for a line its JSON reader could not read as the schema says.
_UNREAD = "_unread"
# A line the classifier finds good that Spark's reader still fails on. The known ways: a name
# given twice, an earlier value not of its type (both readers keep the last, which the
# classifier checked), and nesting deeper than Jackson's 1,000 levels (orjson's is 1,024).
UNREADABLE = "Spark's JSON reader cannot read it (a field given twice, or nested too deep)"
DECISIONS = tuple(o.value for o in Outcome)
ACTIONS = tuple(a.value for a in RecordedAction)
_NOT_TOPIC_ACTIONS = tuple(a.value for a in NOT_TOPIC_ACTIONS)
_PROBLEM = pa.struct(
    [
        pa.field("kind", pa.string()),
        pa.field("problem", pa.string()),
        pa.field("sample", pa.string()),
    ]
)
# monotonically_increasing_id: the partition in the upper 31 bits, the row in the lower 33.
_ROW_BITS = 2**33 - 1


@dataclass(frozen=True)
class AuditInput:
    """Every line of the audit input: LINE_COLUMNS, then the AUDIT_SCHEMA columns read (and,
    with the request, its typed columns: `event_columns`)."""

    lines: DataFrame

    @property
    def events(self) -> DataFrame:
        """The good decision events, with the AUDIT_SCHEMA columns read."""
        return self.lines.where(F.col("problem").isNull()).drop(*LINE_COLUMNS)

    @property
    def quarantine(self) -> DataFrame:
        """The lines that are not good events: source, line, kind, problem, sample."""
        return self.lines.where(F.col("problem").isNotNull()).select(*LINE_COLUMNS)


def event_schema(*, with_request: bool = True) -> StructType:
    """The event columns; without `request`, the JSON parser skips the largest object unread."""
    return StructType([f for f in AUDIT_SCHEMA.fields if with_request or f.name != "request"])


def event_columns(*, with_request: bool = True) -> list[str]:
    """The event's columns as jobs and the lake have them: the record's, and with `request`
    its typed columns (`pipeline.sources.typed_requests`)."""
    names = event_schema(with_request=with_request).fieldNames()
    return [*names, TYPED_REQUEST_COLUMN] if with_request else names


def read_audit(
    spark: SparkSession, paths: Sequence[str], *, with_request: bool = True
) -> AuditInput:
    """Read audit logs from files, directories, globs or any Hadoop URI; never infer a schema."""
    # The session reads each file whole, in one task (pipeline.session): line numbers count
    # rows from the start of the partition. A file split by other settings has no line numbers.
    text = spark.read.text(list(paths))
    line = F.when(
        F.input_file_block_start() == 0,
        (F.monotonically_increasing_id().bitwiseAND(F.lit(_ROW_BITS))) + 1,
    )
    return classified(
        text.select(F.input_file_name().alias("source"), line.alias("line"), "value"),
        with_request=with_request,
    )


def classified(raw: DataFrame, *, with_request: bool = True, envelope: bool = False) -> AuditInput:
    """Lines (source, line, value: the text) classified, and the good ones parsed by Spark.

    With `envelope`, each value is an audit topic record: the event is its `data`.
    """
    # Python gets the bytes: a value that is not UTF-8 is a bad line, never a failed job.
    value = F.col("value").cast("binary")
    staged = raw.select(
        "source",
        "line",
        "value",
        (_classify_record(value) if envelope else _classify(value)).alias("p"),
    )
    schema = event_schema(with_request=with_request)
    unread = StructField(_UNREAD, StringType())
    # Not FAILFAST: one line must never fail the job. A good line Spark cannot read is
    # malformed (UNREADABLE).
    options = {
        "timestampFormat": TIME_FORMAT,
        "mode": "PERMISSIVE",
        "columnNameOfCorruptRecord": _UNREAD,
    }
    if envelope:
        wrapped = StructType([StructField("data", schema), unread])
        parsed = F.from_json("value", wrapped, options)
        event = F.col("j.data")
    else:
        parsed = F.from_json("value", StructType([*schema.fields, unread]), options)
        event = F.col("j")
    good = F.col("p").isNull()
    unreadable = good & F.col(f"j.{_UNREAD}").isNotNull()
    lines = staged.select("source", "line", "value", "p", F.when(good, parsed).alias("j")).select(
        "source",
        "line",
        F.when(unreadable, F.lit(MALFORMED)).otherwise(F.col("p.kind")).alias("kind"),
        F.when(unreadable, F.lit(UNREADABLE)).otherwise(F.col("p.problem")).alias("problem"),
        F.when(unreadable, _sample(F.col("value"))).otherwise(F.col("p.sample")).alias("sample"),
        *(F.when(~unreadable, event[f.name]).alias(f.name) for f in schema.fields),
    )
    return AuditInput(with_typed_request(lines) if with_request else lines)


def _sample(value: Column) -> Column:
    # `audit_lines.sample` of a line that is UTF-8, in Spark: the first bytes, and a
    # character they cut in two (decoded as replacement characters) dropped.
    head = F.decode(F.substring(value.cast("binary"), 1, SAMPLE_BYTES), "UTF-8")
    return F.regexp_replace(head, "\ufffd+$", "")


def _problems(values: pa.Array, check: Callable[[Any], Problem | None]) -> pa.Array:
    # The values are bytes, or None for a record with no value.
    rows: list[dict[str, str | None] | None] = []
    for value in values.to_pylist():
        problem = check(value)
        if problem is None:
            rows.append(None)
        else:
            shown = None if value is None else sample(value)
            rows.append({"kind": problem.kind, "problem": problem.reason, "sample": shown})
    return pa.array(rows, _PROBLEM)


def _classify_batch(values: pa.Array) -> pa.Array:
    return _problems(values, classify)


def _classify_record_batch(values: pa.Array) -> pa.Array:
    return _problems(values, classify_envelope)


_PROBLEM_TYPE = StructType([StructField(f.name, StringType()) for f in _PROBLEM])
_classify = arrow_udf(_classify_batch, _PROBLEM_TYPE)  # type: ignore[call-overload]
_classify_record = arrow_udf(_classify_record_batch, _PROBLEM_TYPE)  # type: ignore[call-overload]


def line_counts(audit: AuditInput) -> DataFrame:
    """Bad lines by file, kind and problem: source, kind, problem, lines."""
    return audit.quarantine.groupBy("source", "kind", "problem").agg(
        F.count(F.lit(1)).alias("lines")
    )


def line_summary(events: int, bad: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Every job's count of its input lines, from its events and `line_counts` rows."""
    kinds = dict.fromkeys(KINDS, 0)
    by_problem: dict[str, int] = defaultdict(int)
    by_file: dict[str, int] = defaultdict(int)
    versions: dict[str, int] = defaultdict(int)
    for row in bad:
        kinds[row["kind"]] += row["lines"]
        by_file[row["source"]] += row["lines"]
        if row["kind"] == MALFORMED:
            by_problem[row["problem"]] += row["lines"]
        elif row["kind"] == UNKNOWN_VERSION:
            versions[row["problem"].removeprefix("schema version ")] += row["lines"]
    return {
        "total": events + sum(kinds.values()),
        "events": events,
        BLANK: kinds[BLANK],
        MALFORMED: kinds[MALFORMED],
        UNKNOWN_VERSION: kinds[UNKNOWN_VERSION],
        "malformed_by_problem": dict(sorted(by_problem.items())),
        "unknown_versions": dict(sorted(versions.items())),
        "bad_by_file": dict(sorted(by_file.items())),
    }


def resource_type() -> Column:
    """The event's resource type; a v1 event (none recorded) is about a topic."""
    return F.coalesce(F.col("resource_type"), F.lit(ResourceType.TOPIC.value))


def resource() -> Column:
    """The event's resource name; a v1 event's is its topic."""
    return F.coalesce(F.col("resource"), F.col("topic"))


def about_topic() -> Column:
    """Whether the event is about a topic (every v1 event is)."""
    return resource_type() == F.lit(ResourceType.TOPIC.value)
