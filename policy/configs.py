"""Kafka topic-config semantics: typed values, units, and the three ways configs change."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from enum import StrEnum

from kafka_policy_proxy.policy.model import ConfigChange, ConfigMap, ConfigOp


class ConfigType(StrEnum):
    """How a config's value is read and how a rule's bounds are written."""

    NUMBER = "number"
    DURATION = "duration"  # milliseconds; bounds may be written as "7d", "12h", "500ms"
    SIZE = "size"  # bytes; bounds may be written as "1GiB", "512MB"
    BOOLEAN = "boolean"
    STRING = "string"
    LIST = "list"  # comma-separated; APPEND/SUBTRACT apply


# Topic configs (Kafka 4.x TopicConfig). Anything not listed is treated as a string, or as
# the type a rule declares for it.
TOPIC_CONFIG_TYPES: Mapping[str, ConfigType] = {
    "cleanup.policy": ConfigType.LIST,
    "compression.type": ConfigType.STRING,
    "compression.gzip.level": ConfigType.NUMBER,
    "compression.lz4.level": ConfigType.NUMBER,
    "compression.zstd.level": ConfigType.NUMBER,
    "delete.retention.ms": ConfigType.DURATION,
    "file.delete.delay.ms": ConfigType.DURATION,
    "flush.messages": ConfigType.NUMBER,
    "flush.ms": ConfigType.DURATION,
    "follower.replication.throttled.replicas": ConfigType.LIST,
    "index.interval.bytes": ConfigType.SIZE,
    "leader.replication.throttled.replicas": ConfigType.LIST,
    "local.retention.bytes": ConfigType.SIZE,
    "local.retention.ms": ConfigType.DURATION,
    "max.compaction.lag.ms": ConfigType.DURATION,
    "max.message.bytes": ConfigType.SIZE,
    "message.timestamp.after.max.ms": ConfigType.DURATION,
    "message.timestamp.before.max.ms": ConfigType.DURATION,
    "message.timestamp.type": ConfigType.STRING,
    "min.cleanable.dirty.ratio": ConfigType.NUMBER,
    "min.compaction.lag.ms": ConfigType.DURATION,
    "min.insync.replicas": ConfigType.NUMBER,
    "preallocate": ConfigType.BOOLEAN,
    "remote.storage.enable": ConfigType.BOOLEAN,
    "remote.log.copy.disable": ConfigType.BOOLEAN,
    "remote.log.delete.on.disable": ConfigType.BOOLEAN,
    "retention.bytes": ConfigType.SIZE,
    "retention.ms": ConfigType.DURATION,
    "segment.bytes": ConfigType.SIZE,
    "segment.index.bytes": ConfigType.SIZE,
    "segment.jitter.ms": ConfigType.DURATION,
    "segment.ms": ConfigType.DURATION,
    "unclean.leader.election.enable": ConfigType.BOOLEAN,
}

# For these, -1 means "no limit"; compared as +infinity, so it passes a min and fails a max.
UNLIMITED_WHEN_NEGATIVE = frozenset(
    {"retention.ms", "retention.bytes", "local.retention.ms", "local.retention.bytes"}
)

_DURATION_UNITS = {
    "ms": 1,
    "s": 1000,
    "m": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
    "w": 604_800_000,
}
_SIZE_UNITS = {
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
# Largest unit first; weeks are left out because "14d" reads better than "2w".
_READABLE: Mapping[ConfigType, tuple[tuple[int, str], ...]] = {
    ConfigType.DURATION: ((86_400_000, "d"), (3_600_000, "h"), (60_000, "m"), (1000, "s")),
    ConfigType.SIZE: ((1024**4, "TiB"), (1024**3, "GiB"), (1024**2, "MiB"), (1024, "KiB")),
}
_QUANTITY = re.compile(r"\s*(-?\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*")


def config_type(name: str, declared: ConfigType | None = None) -> ConfigType:
    """The type a config is read as: the declared one, else Kafka's, else string."""
    if declared is not None:
        return declared
    return TOPIC_CONFIG_TYPES.get(name, ConfigType.STRING)


def parse_bound(value: int | float | str, kind: ConfigType) -> float:
    """Parse a rule bound ("7d", "1GiB", 3, "0.5") into the config's unit; ValueError if bad."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a {kind.value}")
    if isinstance(value, int | float):
        return float(value)
    match = _QUANTITY.fullmatch(value)
    if match is None:
        raise ValueError(f"{value!r} is not a {kind.value}")
    number, unit = float(match.group(1)), match.group(2).lower()
    if not unit:
        return number
    units = {ConfigType.DURATION: _DURATION_UNITS, ConfigType.SIZE: _SIZE_UNITS}.get(kind)
    if units is None or unit not in units:
        known = ", ".join(units) if units else "none"
        raise ValueError(f"{value!r}: unknown unit {unit!r} for a {kind.value} (units: {known})")
    return number * units[unit]


def parse_value(name: str, value: str) -> float | None:
    """Read a config's value as a number (ms, bytes, count); None if it is not numeric."""
    try:
        number = float(value)
    except ValueError:
        return None
    if number < 0 and name in UNLIMITED_WHEN_NEGATIVE:
        return math.inf
    return number


def describe(value: float, kind: ConfigType) -> str:
    """Render a number for a message: the raw value, plus a readable unit where it helps."""
    if math.isinf(value):
        return "-1 (unlimited)"
    raw = str(int(value)) if value == int(value) else str(value)
    for factor, label in _READABLE.get(kind, ()):
        if value and value % factor == 0:
            return f"{raw} ({int(value // factor)}{label})"
    return raw


def split_list(value: str | None) -> list[str]:
    """Split a list config's value into its items."""
    if not value:
        return []
    return [item.strip() for item in value.split(",") if item.strip()]


def apply_create(changes: Iterable[ConfigChange], defaults: Mapping[str, str | None]) -> ConfigMap:
    """CreateTopics: the requested configs over the broker defaults (a null value is ignored)."""
    effective = dict(defaults)
    for change in changes:
        if change.value is not None:
            effective[change.name] = change.value
    return ConfigMap(effective)


def apply_replace(changes: Iterable[ConfigChange], defaults: Mapping[str, str | None]) -> ConfigMap:
    """AlterConfigs: a full replacement; any config not sent goes back to its default."""
    return apply_create(changes, defaults)


def apply_incremental(
    changes: Iterable[ConfigChange],
    current: Mapping[str, str | None],
    defaults: Mapping[str, str | None],
) -> ConfigMap:
    """IncrementalAlterConfigs: SET, DELETE (to default), APPEND/SUBTRACT (list items)."""
    effective = dict(defaults)
    effective.update(current)
    for change in changes:
        name = change.name
        if change.op is ConfigOp.SET:
            effective[name] = change.value
        elif change.op is ConfigOp.DELETE:
            if name in defaults:
                effective[name] = defaults[name]
            else:
                effective.pop(name, None)
        else:
            items = split_list(effective.get(name))
            given = split_list(change.value)
            if change.op is ConfigOp.APPEND:
                items += [item for item in given if item not in items]
            else:
                items = [item for item in items if item not in given]
            effective[name] = ",".join(items)
    return ConfigMap(effective)
