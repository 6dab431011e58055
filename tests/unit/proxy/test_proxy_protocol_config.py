"""listeners.proxy_protocol and its settings: safe defaults, and bad values named by key."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import pytest
import yaml

from kafka_policy_proxy.proxy.config import ConfigError, build_config, load_config


def listeners(**values: Any) -> Any:
    return build_config(
        {"upstream": {"bootstrap_servers": ["b:9092"]}, "listeners": values}, None
    ).listeners


def test_off_by_default() -> None:
    config = listeners()
    assert config.proxy_protocol == "off"
    assert config.proxy_protocol_allowed_peers == []


def test_yaml_off_and_required(tmp_path: Path) -> None:
    # A bare `off` is YAML 1.1's false: it still means off.
    path = tmp_path / "proxy.yaml"
    for text, expected in (("off", "off"), ("required", "required"), ("'off'", "off")):
        path.write_text(
            f"upstream: {{bootstrap_servers: ['b:9092']}}\nlisteners: {{proxy_protocol: {text}}}\n"
        )
        assert load_config(path).listeners.proxy_protocol == expected
    assert yaml.safe_load("x: off") == {"x": False}


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"proxy_protocol": True}, "listeners.proxy_protocol"),  # YAML's `on`: ambiguous
        ({"proxy_protocol": "optional"}, "listeners.proxy_protocol"),  # spoofable: no such mode
        ({"proxy_protocol": "required", "proxy_protocol_timeout_s": 0}, "proxy_protocol_timeout_s"),
        (
            {"proxy_protocol": "required", "proxy_protocol_allowed_peers": ["lb.example"]},
            "listeners.proxy_protocol_allowed_peers",
        ),
        ({"proxy_protocol_allowed_peers": ["10.0.0.0/8"]}, "proxy_protocol_allowed_peers"),
    ],
)
def test_bad_values_are_refused_naming_the_key(values: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        listeners(**values)


def test_allowed_peers_and_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    config = listeners(
        proxy_protocol="required", proxy_protocol_allowed_peers=["10.1.0.0/16", "fd00::/8"]
    )
    assert config.proxy_protocol_allowed_peers == [
        ipaddress.ip_network("10.1.0.0/16"),
        ipaddress.ip_network("fd00::/8"),
    ]
    monkeypatch.setenv("KPP_UPSTREAM__BOOTSTRAP_SERVERS", "b:9092")
    monkeypatch.setenv("KPP_LISTENERS__PROXY_PROTOCOL", "required")
    assert load_config(None).listeners.proxy_protocol == "required"
