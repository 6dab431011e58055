"""Reading the proxy's audit log (docs/audit-log.md) with an explicit schema; bad lines kept."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from pipeline.spark_schema import struct_type
from policy.decision_log import (
    EVENT_KIND,
    NOT_TOPIC_ACTIONS,
    READABLE_VERSIONS,
    Outcome,
    RecordedAction,
    ResourceType,
    json_schema,
)

CORRUPT = "_corrupt_record"
TIME_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"

# Derived from the record's owner. `request` (and `rewritten`, what overrides made of it) are
# read as the raw JSON text of the object: only replay parses the request, in Python, and
# replays it from what the client sent. A v1 event reads with the four trace fields null.
AUDIT_SCHEMA = struct_type(json_schema(), {"request": StringType(), "rewritten": StringType()})

# What the jobs need of every event, v1 or v2; a topic record (v1, or resource_type topic)
# also needs its topic.
REQUIRED = (
    "time",
    "schema",
    "event",
    "principal",
    "action",
    "decision",
    "mode",
    "violations",
)
DECISIONS = tuple(o.value for o in Outcome)
ACTIONS = tuple(a.value for a in RecordedAction)
_NOT_TOPIC_ACTIONS = tuple(a.value for a in NOT_TOPIC_ACTIONS)
_RESOURCE_TYPES = tuple(r.value for r in ResourceType)


@dataclass(frozen=True)
class AuditInput:
    """Every line of the audit input: `problem` is null for a good event, else why it is not."""

    lines: DataFrame

    @property
    def events(self) -> DataFrame:
        """The good decision events, with the columns of AUDIT_SCHEMA (request if read)."""
        return self.lines.where(F.col("problem").isNull()).drop("problem", "source", CORRUPT)

    @property
    def malformed(self) -> DataFrame:
        """The lines that are not good events: source file, problem and the raw line if any."""
        return self.lines.where(F.col("problem").isNotNull()).select(
            "source", "problem", F.col(CORRUPT).alias("line")
        )


def audit_schema(*, with_request: bool = True) -> StructType:
    """The read schema; without `request`, the JSON parser skips the largest object unread."""
    fields = [f for f in AUDIT_SCHEMA.fields if with_request or f.name != "request"]
    return StructType([*fields, StructField(CORRUPT, StringType())])


def read_audit(
    spark: SparkSession, paths: Sequence[str], *, with_request: bool = True
) -> AuditInput:
    """Read audit logs from files, directories, globs or any Hadoop URI; never infer a schema."""
    raw = (
        spark.read.schema(audit_schema(with_request=with_request))
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .option("timestampFormat", TIME_FORMAT)
        .json(list(paths))
    )
    required = [*REQUIRED, "request"] if with_request else list(REQUIRED)
    return AuditInput(
        raw.withColumn("problem", _problem(required)).withColumn("source", F.input_file_name())
    )


def resource_type() -> Column:
    """The event's resource type; a v1 event (none recorded) is about a topic."""
    return F.coalesce(F.col("resource_type"), F.lit(ResourceType.TOPIC.value))


def resource() -> Column:
    """The event's resource name; a v1 event's is its topic."""
    return F.coalesce(F.col("resource"), F.col("topic"))


def about_topic() -> Column:
    """Whether the event is about a topic (every v1 event is)."""
    return resource_type() == F.lit(ResourceType.TOPIC.value)


def _problem(required: Sequence[str]) -> Column:
    missing = [F.when(F.col(name).isNull(), F.lit(name)) for name in required]
    is_topic = about_topic()
    missing.append(F.when(is_topic & F.col("topic").isNull(), F.lit("topic")))
    # As the record's owner has it (`DecisionRecord`): a topic is named exactly by topic
    # records, and admin_api and alter_broker_config are exactly the records of no topic.
    return (
        F.when(F.col(CORRUPT).isNotNull(), F.lit("not a JSON object of the audit schema"))
        .when(
            ~F.col("schema").isin(*READABLE_VERSIONS),
            F.format_string("schema version %d", "schema"),
        )
        .when(F.col("event") != EVENT_KIND, F.format_string("unknown event kind %s", "event"))
        .when(
            ~F.col("decision").isin(*DECISIONS),
            F.format_string("unknown decision %s", "decision"),
        )
        .when(
            F.coalesce(*missing).isNotNull(),
            F.concat(F.lit("missing field "), F.coalesce(*missing)),
        )
        .when(~F.col("action").isin(*ACTIONS), F.format_string("unknown action %s", "action"))
        .when(
            ~resource_type().isin(*_RESOURCE_TYPES),
            F.format_string("unknown resource type %s", "resource_type"),
        )
        .when(
            is_topic == F.col("action").isin(*_NOT_TOPIC_ACTIONS),
            F.format_string("action %s on resource type %s", F.col("action"), resource_type()),
        )
        .when(
            ~is_topic & F.col("topic").isNotNull(),
            F.format_string("a topic on resource type %s", "resource_type"),
        )
    )
