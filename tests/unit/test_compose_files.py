"""docker-compose.yml and its TLS variant set only config keys the proxy knows, and the TLS
variant's files are the ones its certs service writes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kafka_policy_proxy.proxy.config import _env_names

ROOT = Path(__file__).resolve().parents[2]


def proxy_env(name: str) -> dict[str, str]:
    service = yaml.safe_load((ROOT / name).read_text())["services"]["proxy"]
    return {k: str(v) for k, v in service["environment"].items()}


@pytest.mark.parametrize("name", ["docker-compose.yml", "docker-compose.tls.yml"])
def test_the_proxy_environment_names_known_keys(name: str) -> None:
    assert set(proxy_env(name)) <= _env_names()


def test_the_tls_variant_uses_what_the_certs_service_writes() -> None:
    tls = yaml.safe_load((ROOT / "docker-compose.tls.yml").read_text())
    services = tls["services"]
    assert "--dns=kafka-1" in services["certs"]["entrypoint"]
    env = proxy_env("docker-compose.tls.yml")
    assert env["KPP_UPSTREAM__TLS__CA_FILE"] == "/certs/ca.pem"
    assert all(s.endswith(":9094") for s in env["KPP_UPSTREAM__BOOTSTRAP_SERVERS"].split(","))
    for broker in ("kafka-1", "kafka-2", "kafka-3"):
        advertised = services[broker]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
        assert f"SSL://{broker}:9094" in advertised
    # throwaway_ca.py's names: ca.pem and the broker's PEM keystore.
    assert tls["x-kafka-tls-env"]["KAFKA_SSL_KEYSTORE_LOCATION"] == "/certs/broker.keystore.pem"
