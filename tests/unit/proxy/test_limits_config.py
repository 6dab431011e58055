"""The `limits` section: its defaults, and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kafka_policy_proxy.proxy.config import ConfigError, LimitsConfig, load_config

UPSTREAM = {"bootstrap_servers": ["kafka:9092"]}


def write(tmp_path: Path, limits: dict[str, object]) -> Path:
    path = tmp_path / "proxy.yaml"
    path.write_text(yaml.safe_dump({"upstream": UPSTREAM, "limits": limits}))
    return path


def test_the_example_config_states_the_defaults() -> None:
    example = load_config(Path(__file__).parents[3] / "examples" / "proxy.yaml")
    assert example.limits == LimitsConfig()


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        (
            {"max_frame_bytes": 8 << 20, "max_buffered_bytes": 4 << 20},
            "limits.max_buffered_bytes: Value error, must be at least limits.max_frame_bytes",
        ),
        ({"max_connections_per_listener": 0}, "limits.max_connections_per_listener:"),
        ({"max_connections": -1}, "limits.max_connections:"),
        ({"stall_timeout_s": 0}, "limits.stall_timeout_s:"),
        ({"max_conections": 5}, "limits.max_conections: unknown key"),
    ],
)
def test_a_bad_limit_is_refused_by_name(
    tmp_path: Path, limits: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, limits))


def test_a_limit_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KPP_LIMITS__MAX_CONNECTIONS_PER_LISTENER", "7")
    assert load_config(write(tmp_path, {})).limits.max_connections_per_listener == 7
