"""The `admin` section: the listener that needs no credentials stays on loopback unless told."""

from __future__ import annotations

from pathlib import Path

import yaml

from kafka_policy_proxy.proxy.config import AdminConfig, load_config


def test_the_admin_listener_defaults_to_loopback(tmp_path: Path) -> None:
    path = tmp_path / "proxy.yaml"
    path.write_text(
        yaml.safe_dump({"upstream": {"bootstrap_servers": ["kafka:9092"]}, "admin": {"port": 9191}})
    )
    assert load_config(path).admin.bind_host == "127.0.0.1"
    assert AdminConfig().bind_host == "127.0.0.1"


def test_the_example_config_states_the_default() -> None:
    example = load_config(Path(__file__).parents[3] / "examples" / "proxy.yaml")
    assert example.admin.bind_host == AdminConfig().bind_host
