"""Per-API builders for split/merge tests: requests with named topics, broker-like answers."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from harness.messages import build
from kafka_policy_proxy.codec.guarded.base import element_class
from kafka_policy_proxy.codec.registry import request_class, response_class

TOPIC = 2
BROKER = 4


@dataclass(frozen=True)
class ApiCase:
    """How to build a request of N topics and a success answer for whatever was forwarded."""

    key: int
    entries_field: str
    results_field: str
    make_entry: Callable[[type[Any], str], Any]
    make_result: Callable[[type[Any], Any], Any]
    entry_name: Callable[[Any], str]
    result_errors: Callable[[Any], list[Any]]
    top_level: dict[str, Any]

    def request(self, version: int, names: Sequence[str]) -> Any:
        """A request naming these topics, in order."""
        cls = request_class(self.key, version)
        entries_field = self.entries_for(version)
        entry_cls = element_class(cls, entries_field) if entries_field != "topic_names" else None
        entries = tuple(
            name if entry_cls is None else self.make_entry(entry_cls, name) for name in names
        )
        return build(cls, **{entries_field: entries}, **self.top_level)

    def entries_for(self, version: int) -> str:
        """The entries field of this version (DeleteTopics changed it in v6)."""
        if self.key == 20 and version < 6:
            return "topic_names"
        return self.entries_field

    def broker_answer(self, forward: Any, seed: int = 0) -> Any:
        """What a broker says to `forward`: success for every entry, in shuffled order."""
        version = int(forward.__version__)
        cls = response_class(self.key, version)
        result_cls = element_class(cls, self.results_field)
        results = [
            self.make_result(result_cls, e) for e in getattr(forward, self.entries_for(version))
        ]
        random.Random(seed).shuffle(results)
        return build(
            cls,
            throttle_time=7,
            error_code=0,
            error_message=None,
            **{self.results_field: tuple(results)},
        )


def _result_errors(result: Any) -> list[Any]:
    return [result]


def _partition_errors(result: Any) -> list[Any]:
    return list(result.partitions)


def _ct_entry(cls: type[Any], name: str) -> Any:
    config_cls = element_class(cls, "configs")
    configs = (build(config_cls, name="retention.ms", value="1000"),)
    return build(
        cls, name=name, num_partitions=3, replication_factor=1, assignments=(), configs=configs
    )


def _ct_result(cls: type[Any], entry: Any) -> Any:
    return build(
        cls,
        name=entry.name,
        topic_id=uuid.uuid4(),
        error_code=0,
        error_message=None,
        num_partitions=3,
        replication_factor=1,
        configs=(),
    )


def _cp_entry(cls: type[Any], name: str) -> Any:
    return build(cls, name=name, count=6, assignments=None)


def _named_result(cls: type[Any], entry: Any) -> Any:
    return build(cls, name=entry.name, error_code=0, error_message=None)


def _config_entry(cls: type[Any], name: str) -> Any:
    config_cls = element_class(cls, "configs")
    config = build(config_cls, name="retention.ms", value="1000", config_operation=0)
    kind = BROKER if name.startswith("broker:") else TOPIC
    return build(
        cls, resource_type=kind, resource_name=name.removeprefix("broker:"), configs=(config,)
    )


def _config_result(cls: type[Any], entry: Any) -> Any:
    return build(
        cls,
        resource_type=entry.resource_type,
        resource_name=entry.resource_name,
        error_code=0,
        error_message=None,
    )


def _config_name(entry: Any) -> str:
    prefix = "broker:" if entry.resource_type == BROKER else ""
    return f"{prefix}{entry.resource_name}"


def _apr_entry(cls: type[Any], name: str) -> Any:
    partition_cls = element_class(cls, "partitions")
    partitions = tuple(build(partition_cls, partition_index=i, replicas=(1, 2)) for i in (0, 1))
    return build(cls, name=name, partitions=partitions)


def _apr_result(cls: type[Any], entry: Any) -> Any:
    partition_cls = element_class(cls, "partitions")
    partitions = tuple(
        build(partition_cls, partition_index=p.partition_index, error_code=0, error_message=None)
        for p in entry.partitions
    )
    return build(cls, name=entry.name, partitions=partitions)


def _dt_entry(cls: type[Any], name: str) -> Any:
    return build(cls, name=name, topic_id=None)


def _dt_result(cls: type[Any], entry: Any) -> Any:
    name = entry if isinstance(entry, str) else entry.name
    return build(cls, name=name, topic_id=uuid.uuid4(), error_code=0, error_message=None)


def _dr_entry(cls: type[Any], name: str) -> Any:
    partition_cls = element_class(cls, "partitions")
    partitions = tuple(build(partition_cls, partition_index=i, offset=10) for i in (0, 1))
    return build(cls, name=name, partitions=partitions)


def _dr_result(cls: type[Any], entry: Any) -> Any:
    partition_cls = element_class(cls, "partitions")
    partitions = tuple(
        build(partition_cls, partition_index=p.partition_index, low_watermark=10, error_code=0)
        for p in entry.partitions
    )
    return build(cls, name=entry.name, partitions=partitions)


def _name(entry: Any) -> str:
    return entry if isinstance(entry, str) else entry.name  # type: ignore[no-any-return]


CASES: dict[int, ApiCase] = {
    19: ApiCase(
        19,
        "topics",
        "topics",
        _ct_entry,
        _ct_result,
        _name,
        _result_errors,
        {"timeout": 5000, "validate_only": True},
    ),
    37: ApiCase(
        37,
        "topics",
        "results",
        _cp_entry,
        _named_result,
        _name,
        _result_errors,
        {"timeout": 5000, "validate_only": True},
    ),
    33: ApiCase(
        33,
        "resources",
        "responses",
        _config_entry,
        _config_result,
        _config_name,
        _result_errors,
        {"validate_only": True},
    ),
    44: ApiCase(
        44,
        "resources",
        "responses",
        _config_entry,
        _config_result,
        _config_name,
        _result_errors,
        {"validate_only": True},
    ),
    45: ApiCase(
        45,
        "topics",
        "responses",
        _apr_entry,
        _apr_result,
        _name,
        _partition_errors,
        {"timeout": 5000, "allow_replication_factor_change": False},
    ),
    20: ApiCase(
        20, "topics", "responses", _dt_entry, _dt_result, _name, _result_errors, {"timeout": 5000}
    ),
    21: ApiCase(
        21, "topics", "topics", _dr_entry, _dr_result, _name, _partition_errors, {"timeout": 5000}
    ),
}
