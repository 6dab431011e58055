"""Rows of a small DataFrame collected on the driver, their instants as UTC datetimes."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def collect_rows(
    df: DataFrame, times: Sequence[str] = ("first_seen", "last_seen")
) -> list[dict[str, Any]]:
    """The rows as dicts; the timestamp columns `times` as UTC datetimes."""
    # Timestamps travel as epoch microseconds: collected, they would take the driver's zone.
    selected = df.select(
        *(F.unix_micros(F.col(c)).alias(c) if c in times else F.col(c) for c in df.columns)
    )
    rows = [row.asDict() for row in selected.collect()]
    for row in rows:
        for column in times:
            if row.get(column) is not None:
                row[column] = _EPOCH + timedelta(microseconds=row[column])
    return rows
