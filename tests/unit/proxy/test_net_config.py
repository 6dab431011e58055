"""The `net` section: splice off unless asked for, and a bad key refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kafka_policy_proxy.proxy.config import ConfigError, NetConfig, load_config

UPSTREAM = {"bootstrap_servers": ["kafka:9092"]}


def write(tmp_path: Path, net: dict[str, object]) -> Path:
    path = tmp_path / "proxy.yaml"
    path.write_text(yaml.safe_dump({"upstream": UPSTREAM, "net": net}))
    return path


def test_splice_is_off_unless_asked_for(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, {})).net.splice is False
    assert load_config(write(tmp_path, {"splice": True})).net.splice is True


@pytest.mark.parametrize(
    ("net", "message"),
    [({"splice": "sometimes"}, "net.splice:"), ({"splise": True}, "net.splise: unknown key")],
)
def test_a_bad_net_key_is_refused_by_name(
    tmp_path: Path, net: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, net))


def test_the_example_config_states_the_default() -> None:
    example = load_config(Path(__file__).parents[3] / "examples" / "proxy.yaml")
    assert example.net == NetConfig()
