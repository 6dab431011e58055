"""A decision record's `request` as typed columns: what replay reads instead of the JSON text.

`typed_request` is one struct column with a nullable struct per record shape
(`policy.decision_reader` reads the same shapes from the text); exactly one is set:

- `topic`: a topic request (`TopicRequest.to_dict()`): topic, topic_id, action, alter_kind,
  principal, validate_only, record_offsets, and `requested` and `current` as the JSON text of
  those objects. Few distinct states recur across many events, so Parquet stores them
  dictionary-encoded and replay parses each distinct one once, keyed by that text;
- `admin`: an admin API call: api, principal;
- `config`: a change of a config resource that is not a topic: config_resource, name,
  principal, changes, replace, validate_only;
- `refusal`: a request refused before any judgement: api, sasl_state;
- `summary`: a summary record of a request's many topics: api, topics (how many).

Spark's JSON reader parses the text once more (in the JVM, at ingest or on a raw read). The
column is null when the text is not the shape's exact form as the proxy writes it: Spark
cannot read it, a field every such record has is missing or null. Replay then reads the text,
so every request is judged as its text says.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    LongType,
    StringType,
    StructField,
    StructType,
)

TYPED_REQUEST_COLUMN = "typed_request"
_PARSED_COLUMN = "_request_parsed"
_UNREAD = "_unread"
_PRINCIPAL = StructType(
    [StructField(name, StringType()) for name in ("name", "client_id", "address")]
)
_CHANGES = ArrayType(
    StructType([StructField(name, StringType()) for name in ("name", "op", "value")])
)


def _struct(**fields: object) -> StructType:
    return StructType([StructField(name, kind) for name, kind in fields.items()])  # type: ignore[arg-type]


_TOPIC = _struct(
    topic=StringType(),
    topic_id=StringType(),
    action=StringType(),
    alter_kind=StringType(),
    principal=_PRINCIPAL,
    validate_only=BooleanType(),
    requested=StringType(),
    current=StringType(),
    record_offsets=ArrayType(ArrayType(LongType())),
)
_ADMIN = _struct(api=StringType(), principal=_PRINCIPAL)
_CONFIG = _struct(
    config_resource=StringType(),
    name=StringType(),
    principal=_PRINCIPAL,
    changes=_CHANGES,
    replace=BooleanType(),
    validate_only=BooleanType(),
)
_REFUSAL = _struct(api=StringType(), sasl_state=StringType())
_SUMMARY = _struct(api=StringType(), topics=LongType())
TYPED_REQUEST = _struct(
    topic=_TOPIC, admin=_ADMIN, config=_CONFIG, refusal=_REFUSAL, summary=_SUMMARY
)
# Every key of every shape, read at once: a string field given an object keeps its JSON text.
_PARSED = StructType(
    [
        *(f for f in _TOPIC.fields),
        *(f for f in _CONFIG.fields if f.name not in _TOPIC.fieldNames()),
        StructField("api", StringType()),
        StructField("sasl_state", StringType()),
        StructField("refused", StringType()),
        StructField("summarised", LongType()),
        StructField(_UNREAD, StringType()),
    ]
)
_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _UNREAD}


def with_typed_request(lines: DataFrame) -> DataFrame:
    """`lines` with TYPED_REQUEST_COLUMN read from their `request` text."""
    # Parsed in a projection of its own: the typed column reads the parse many times.
    parsed = lines.withColumn(_PARSED_COLUMN, F.from_json("request", _PARSED, _OPTIONS))
    typed = typed_request(F.col(_PARSED_COLUMN), F.col("request"))
    return parsed.withColumn(TYPED_REQUEST_COLUMN, typed).drop(_PARSED_COLUMN)


def typed_request(r: Column, text: Column) -> Column:
    """The request's parsed JSON text as TYPED_REQUEST; null where replay must read the
    text."""

    def given(*names: str) -> Column:
        return F.lit(True) if not names else _all([r[n].isNotNull() for n in names])

    principal = given("principal") & _all(
        [r["principal"][n].isNotNull() for n in _PRINCIPAL.fieldNames()]
    )

    def shape(kind: StructType) -> Column:
        return F.struct(*(r[n].alias(n) for n in kind.fieldNames()))

    # Told apart as the text reader tells them (its first key), from the keys present.
    refused = r["refused"].isNotNull()
    summarised = ~refused & r["summarised"].isNotNull()
    config = ~refused & ~summarised & r["config_resource"].isNotNull()
    admin = ~refused & ~summarised & ~config & r["api"].isNotNull()
    topic = ~refused & ~summarised & ~config & ~admin
    readable = text.isNotNull() & r[_UNREAD].isNull()
    # A field the proxy always writes, missing or null: the text's defaults apply, so the
    # text is read.
    exact = (
        F.when(refused, given("api", "sasl_state"))
        .when(summarised, given("api"))
        .when(config, principal & given("name", "changes", "replace", "validate_only"))
        .when(admin, principal)
        .otherwise(
            principal
            & given("action", "validate_only", "requested", "record_offsets")
            & _object(r["requested"])
            & (r["current"].isNull() | _object(r["current"]))
        )
    )
    return F.when(
        readable & exact,
        F.struct(
            F.when(topic, shape(_TOPIC)).alias("topic"),
            F.when(admin, shape(_ADMIN)).alias("admin"),
            F.when(config, shape(_CONFIG)).alias("config"),
            F.when(
                refused, F.struct(r["api"].alias("api"), r["sasl_state"].alias("sasl_state"))
            ).alias("refusal"),
            F.when(
                summarised, F.struct(r["api"].alias("api"), r["summarised"].alias("topics"))
            ).alias("summary"),
        ),
    )


def _object(text: Column) -> Column:
    # A state that is not an object reads differently as text (`or {}`): the text is read.
    return text.startswith("{")


def _all(conditions: list[Column]) -> Column:
    result = conditions[0]
    for condition in conditions[1:]:
        result = result & condition
    return result
