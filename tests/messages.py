"""Build kio messages in tests without caring which fields a version has."""

from __future__ import annotations

import dataclasses
import datetime
import importlib
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


def metadata_request(names: tuple[str, ...] | None = None) -> Any:
    """A Metadata v12 request for these topics (None: all topics), never auto-creating."""
    from codec.registry import request_class

    cls = request_class(3, 12)
    module = importlib.import_module(cls.__module__)
    topics = (
        None
        if names is None
        else tuple(module.MetadataRequestTopic(topic_id=None, name=name) for name in names)
    )
    return build(
        cls,
        topics=topics,
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
