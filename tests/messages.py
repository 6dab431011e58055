"""Build kio messages in tests without caring which fields a version has."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from kio.schema.errors import ErrorCode


def build(cls: Any, **values: Any) -> Any:
    """Instantiate cls from the values its version has; ints become timedeltas where needed."""
    kwargs = {}
    for field in dataclasses.fields(cls):
        if field.name not in values:
            continue
        value = values[field.name]
        kafka_type = field.metadata.get("kafka_type", "")
        if "timedelta" in kafka_type and isinstance(value, int):
            value = datetime.timedelta(milliseconds=value)
        elif kafka_type == "error_code" and isinstance(value, int):
            value = ErrorCode(value)
        kwargs[field.name] = value
    return cls(**kwargs)
