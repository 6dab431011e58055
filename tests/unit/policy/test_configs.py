"""Kafka config semantics: the three config APIs, typed bounds and their rendering."""

from __future__ import annotations

import math

import pytest

from kafka_policy_proxy.policy.configs import (
    ConfigType,
    apply_create,
    apply_incremental,
    apply_replace,
    describe,
    parse_bound,
    parse_value,
)
from kafka_policy_proxy.policy.model import ConfigChange, ConfigOp

DEFAULTS = {"retention.ms": "604800000", "cleanup.policy": "delete", "segment.ms": "604800000"}


def sets(**configs: str | None) -> list[ConfigChange]:
    return [ConfigChange(k.replace("_", "."), ConfigOp.SET, v) for k, v in configs.items()]


def test_create_lays_requested_configs_over_defaults_and_ignores_nulls() -> None:
    effective = apply_create(sets(retention_ms="3600000", segment_ms=None), DEFAULTS)
    assert effective == {**DEFAULTS, "retention.ms": "3600000"}


def test_alter_configs_is_a_full_replacement() -> None:
    current = {"retention.ms": "3600000", "cleanup.policy": "compact"}
    # Only segment.ms is sent: the topic's retention and cleanup policy go back to defaults.
    effective = apply_replace(sets(segment_ms="3600000"), DEFAULTS)
    assert effective == {**DEFAULTS, "segment.ms": "3600000"}
    assert effective["cleanup.policy"] != current["cleanup.policy"]


def test_incremental_set_and_delete_against_current() -> None:
    current = {**DEFAULTS, "retention.ms": "3600000", "max.message.bytes": "2097152"}
    changes = [
        ConfigChange("segment.ms", ConfigOp.SET, "60000"),
        ConfigChange("retention.ms", ConfigOp.DELETE, None),
        ConfigChange("max.message.bytes", ConfigOp.DELETE, None),
    ]
    effective = apply_incremental(changes, current, DEFAULTS)
    assert effective["segment.ms"] == "60000"
    assert effective["retention.ms"] == DEFAULTS["retention.ms"]  # back to the default
    assert "max.message.bytes" not in effective  # no default known: unset


def test_incremental_append_and_subtract_on_list_configs() -> None:
    current = {"cleanup.policy": "compact"}
    appended = apply_incremental(
        [ConfigChange("cleanup.policy", ConfigOp.APPEND, "delete,compact")], current, DEFAULTS
    )
    assert appended["cleanup.policy"] == "compact,delete"  # no duplicates
    subtracted = apply_incremental(
        [ConfigChange("cleanup.policy", ConfigOp.SUBTRACT, "compact")], appended, DEFAULTS
    )
    assert subtracted["cleanup.policy"] == "delete"


def test_append_to_a_config_the_topic_does_not_override_starts_from_the_default() -> None:
    effective = apply_incremental(
        [ConfigChange("cleanup.policy", ConfigOp.APPEND, "compact")], {}, DEFAULTS
    )
    assert effective["cleanup.policy"] == "delete,compact"


@pytest.mark.parametrize(
    ("text", "kind", "expected"),
    [
        ("7d", ConfigType.DURATION, 7 * 86_400_000),
        ("12h", ConfigType.DURATION, 12 * 3_600_000),
        ("500ms", ConfigType.DURATION, 500),
        ("90s", ConfigType.DURATION, 90_000),
        ("1GiB", ConfigType.SIZE, 1024**3),
        ("512MB", ConfigType.SIZE, 512 * 1000**2),
        (3, ConfigType.NUMBER, 3),
        ("0.5", ConfigType.NUMBER, 0.5),
    ],
)
def test_bounds_with_units(text: str | int, kind: ConfigType, expected: float) -> None:
    assert parse_bound(text, kind) == expected


@pytest.mark.parametrize(
    ("text", "kind", "fragment"),
    [
        ("7x", ConfigType.DURATION, "unknown unit 'x'"),
        ("1GiB", ConfigType.DURATION, "unknown unit 'gib'"),
        ("7d", ConfigType.NUMBER, "units: none"),
        ("lots", ConfigType.SIZE, "is not a size"),
    ],
)
def test_bad_bounds_say_why(text: str, kind: ConfigType, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        parse_bound(text, kind)


def test_minus_one_retention_is_unlimited_but_other_negatives_are_numbers() -> None:
    assert parse_value("retention.ms", "-1") == math.inf
    assert parse_value("retention.bytes", "-1") == math.inf
    assert parse_value("segment.ms", "-1") == -1
    assert parse_value("retention.ms", "soon") is None


def test_describe_adds_a_readable_unit() -> None:
    assert describe(2_592_000_000, ConfigType.DURATION) == "2592000000 (30d)"
    assert describe(8 * 1024**2, ConfigType.SIZE) == "8388608 (8MiB)"
    assert describe(1234, ConfigType.DURATION) == "1234"
    assert describe(math.inf, ConfigType.DURATION) == "-1 (unlimited)"
