"""Reading the proxy's audit log (docs/audit-log.md) with an explicit schema; bad lines kept."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

SCHEMA_VERSION = 1
CORRUPT = "_corrupt_record"
TIME_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"

VIOLATION = StructType(
    [
        StructField("rule", StringType()),
        StructField("message", StringType()),
        StructField("mode", StringType()),
    ]
)

# `request` is read as the raw JSON text of the object: only replay parses it, in Python.
AUDIT_SCHEMA = StructType(
    [
        StructField("time", TimestampType()),
        StructField("schema", IntegerType()),
        StructField("event", StringType()),
        StructField("conn", LongType()),
        StructField("client", StringType()),
        StructField("principal", StringType()),
        StructField("client_id", StringType()),
        StructField("api", StringType()),
        StructField("api_key", IntegerType()),
        StructField("api_version", IntegerType()),
        StructField("action", StringType()),
        StructField("topic", StringType()),
        StructField("validate_only", BooleanType()),
        StructField("decision", StringType()),
        StructField("mode", StringType()),
        StructField("violations", ArrayType(VIOLATION)),
        StructField("request", StringType()),
    ]
)

REQUIRED = (
    "time",
    "schema",
    "event",
    "principal",
    "action",
    "topic",
    "decision",
    "mode",
    "violations",
)
DECISIONS = ("allowed", "denied", "audit-would-deny")


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


def _problem(required: Sequence[str]) -> Column:
    missing = [F.when(F.col(name).isNull(), F.lit(name)) for name in required]
    return (
        F.when(F.col(CORRUPT).isNotNull(), F.lit("not a JSON object of the audit schema"))
        .when(F.col("schema") != SCHEMA_VERSION, F.format_string("schema version %d", "schema"))
        .when(F.col("event") != "decision", F.format_string("unknown event kind %s", "event"))
        .when(
            ~F.col("decision").isin(*DECISIONS),
            F.format_string("unknown decision %s", "decision"),
        )
        .when(
            F.coalesce(*missing).isNotNull(),
            F.concat(F.lit("missing field "), F.coalesce(*missing)),
        )
    )
