"""The `cluster_state` section's read bounds: defaults, and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kafka_policy_proxy.proxy.config import ClusterStateConfig, ConfigError, load_config

UPSTREAM = {"bootstrap_servers": ["kafka:9092"]}


def write(tmp_path: Path, section: dict[str, object]) -> Path:
    path = tmp_path / "proxy.yaml"
    path.write_text(yaml.safe_dump({"upstream": UPSTREAM, "cluster_state": section}))
    return path


def test_the_defaults_protect_a_small_deployment() -> None:
    config = ClusterStateConfig()
    assert (config.connections, config.max_ids_per_request, config.unknown_id_ttl_s) == (
        2,
        100,
        2.0,
    )


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"connections": 0}, "cluster_state.connections:"),
        ({"connections": 17}, "cluster_state.connections:"),
        ({"max_ids_per_request": 0}, "cluster_state.max_ids_per_request:"),
        ({"unknown_id_ttl_s": -1}, "cluster_state.unknown_id_ttl_s:"),
    ],
)
def test_a_bad_bound_is_refused_by_name(
    tmp_path: Path, section: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, section))


def test_a_bound_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KPP_CLUSTER_STATE__MAX_IDS_PER_REQUEST", "7")
    assert load_config(write(tmp_path, {})).cluster_state.max_ids_per_request == 7
