"""JSON Schema to Spark StructType: the pipeline reads records by the schema their owner publishes.

Covers what `policy.decision_log.json_schema()` uses: objects with properties, arrays,
`$ref` into `$defs`, `anyOf` with null (nullable), `enum`/`const`, strings (`date-time` as a
timestamp), booleans, and integers (int when `maximum` fits 32 bits or every enum value does,
else long). Every Spark field is nullable: a reader must see absent fields (older versions)
as null rather than fail.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

_INT_MAX = 2**31 - 1


def struct_type(schema: Mapping[str, Any], overrides: Mapping[str, DataType] = {}) -> StructType:
    """The StructType of an object schema; `overrides` replace top-level fields' types by name."""
    defs = schema.get("$defs", {})
    return StructType(
        [
            StructField(name, overrides.get(name) or _type(prop, defs, name))
            for name, prop in schema["properties"].items()
        ]
    )


def _type(node: Mapping[str, Any], defs: Mapping[str, Any], where: str) -> DataType:
    if "$ref" in node:
        node = defs[node["$ref"].removeprefix("#/$defs/")]
    if "anyOf" in node:
        kinds = [n for n in node["anyOf"] if n.get("type") != "null"]
        if len(kinds) != 1:
            raise ValueError(f"{where}: a union of several types has no Spark type")
        return _type(kinds[0], defs, where)
    kind = node.get("type")
    if kind == "string":
        return TimestampType() if node.get("format") == "date-time" else StringType()
    if kind == "boolean":
        return BooleanType()
    if kind == "integer":
        bound = node.get("maximum", max(node.get("enum", [_INT_MAX + 1])))
        return IntegerType() if bound <= _INT_MAX else LongType()
    if kind == "array":
        return ArrayType(_type(node["items"], defs, f"{where}[]"))
    if kind == "object" and "properties" in node:
        return struct_type({**node, "$defs": defs})
    raise ValueError(f"{where}: no Spark type for {dict(node)}")
