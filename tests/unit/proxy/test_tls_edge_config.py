"""listeners.sni and the TLS reload settings: defaults, and bad values refused by key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kafka_policy_proxy.proxy.config import ConfigError, ProxyConfig, SniConfig, load_config


def config(tmp_path: Path, listeners: dict[str, Any], **extra: Any) -> ProxyConfig:
    path = tmp_path / "proxy.yaml"
    path.write_text(
        yaml.safe_dump(
            {"listeners": listeners, "upstream": {"bootstrap_servers": ["b:9092"]}, **extra}
        )
    )
    return load_config(path)


TLS = {"cert_file": "/tls/tls.crt", "key_file": "/tls/tls.key"}
SNI = {
    "bootstrap_address": "bootstrap.kafka.example.com:9292",
    "advertised_broker_address_pattern": "broker-$(nodeId).kafka.example.com",
}


def test_sni_names_and_ports(tmp_path: Path) -> None:
    sni = config(tmp_path, {"tls": TLS, "sni": SNI}).listeners.sni
    assert sni is not None
    assert (sni.port, sni.bootstrap_host) == (9292, "bootstrap.kafka.example.com")
    assert sni.broker_address(4) == ("broker-4.kafka.example.com", 9292)
    behind_a_balancer = SniConfig(
        bootstrap_address="bootstrap.kafka.example.com:9292",
        advertised_broker_address_pattern="b$(nodeId).kafka.example.com:443",
    )
    assert behind_a_balancer.broker_address(0) == ("b0.kafka.example.com", 443)


def test_tls_reload_defaults(tmp_path: Path) -> None:
    loaded = config(tmp_path, {"tls": TLS}, upstream={"bootstrap_servers": ["b:9092"], "tls": {}})
    assert loaded.listeners.tls is not None and loaded.listeners.tls.reload_interval_s == 5.0
    assert loaded.upstream.tls is not None and loaded.upstream.tls.reload_interval_s == 5.0
    assert loaded.listeners.sni is None  # off unless configured


@pytest.mark.parametrize(
    ("listeners", "words"),
    [
        ({"sni": SNI}, ["sni", "listeners.tls"]),
        ({"tls": TLS, "sni": SNI | {"bootstrap_address": "10.0.0.1:9292"}}, ["bootstrap_address"]),
        ({"tls": TLS, "sni": SNI | {"bootstrap_address": "bootstrap"}}, ["bootstrap_address"]),
        (
            {"tls": TLS, "sni": SNI | {"advertised_broker_address_pattern": "broker.example.com"}},
            ["advertised_broker_address_pattern", "$(nodeId)"],
        ),
        (
            {"tls": TLS, "sni": SNI | {"advertised_broker_address_pattern": "b$(nodeId).x:port"}},
            ["advertised_broker_address_pattern"],
        ),
        ({"tls": TLS | {"reload_interval_s": -1}}, ["reload_interval_s"]),
    ],
)
def test_bad_values_are_refused_naming_the_key(
    tmp_path: Path, listeners: dict[str, Any], words: list[str]
) -> None:
    with pytest.raises(ConfigError) as refused:
        config(tmp_path, listeners)
    for word in words:
        assert word in str(refused.value)
