"""`limits.max_entries_per_request`: its default, and bad values refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kafka_policy_proxy.proxy.config import ConfigError, LimitsConfig, load_config


def test_the_default_bounds_a_request_at_five_thousand_entries() -> None:
    assert LimitsConfig().max_entries_per_request == 5000


@pytest.mark.parametrize("value", [0, -5, 2_000_000, "many"])
def test_a_bad_bound_is_refused_by_name(tmp_path: Path, value: object) -> None:
    path = tmp_path / "proxy.yaml"
    config = {"upstream": {"bootstrap_servers": ["kafka:9092"]}}
    path.write_text(yaml.safe_dump({**config, "limits": {"max_entries_per_request": value}}))
    with pytest.raises(ConfigError, match=r"limits\.max_entries_per_request:"):
        load_config(path)


def test_a_set_bound_is_read(tmp_path: Path) -> None:
    path = tmp_path / "proxy.yaml"
    config = {"upstream": {"bootstrap_servers": ["kafka:9092"]}}
    path.write_text(yaml.safe_dump({**config, "limits": {"max_entries_per_request": 200}}))
    assert load_config(path).limits.max_entries_per_request == 200
