"""The `admission` section: defaults that protect a small deployment, errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kafka_policy_proxy.proxy.config import AdmissionConfig, ConfigError, load_config

UPSTREAM = {"bootstrap_servers": ["kafka:9092"]}


def write(tmp_path: Path, admission: dict[str, object]) -> Path:
    path = tmp_path / "proxy.yaml"
    path.write_text(yaml.safe_dump({"upstream": UPSTREAM, "admission": admission}))
    return path


def test_the_defaults() -> None:
    config = AdmissionConfig()
    assert (config.concurrent_judgements, config.entries_per_second, config.burst) == (
        2,
        5000.0,
        10000,
    )


def test_values_are_read(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, {"concurrent_judgements": 4, "burst": 50}))
    assert config.admission.concurrent_judgements == 4
    assert config.admission.burst == 50


@pytest.mark.parametrize(
    ("admission", "message"),
    [
        ({"concurrent_judgements": 0}, "admission.concurrent_judgements:"),
        ({"entries_per_second": 0}, "admission.entries_per_second:"),
        ({"burst": -5}, "admission.burst:"),
        ({"bursts": 5}, "admission.bursts: unknown key"),
    ],
)
def test_a_bad_value_is_refused_by_name(
    tmp_path: Path, admission: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, admission))
