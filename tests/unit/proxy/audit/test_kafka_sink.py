"""The audit topic's producer settings follow the proxy's own security; closed needs a topic."""

from __future__ import annotations

from typing import Any

import pytest

from kafka_policy_proxy.proxy.audit.kafka_sink import envelope, producer_settings
from kafka_policy_proxy.proxy.config import ConfigError, build_config
from kafka_policy_proxy.proxy.kafka_client.security import ClientSecurity
from kafka_policy_proxy.proxy.kafka_client.tls_material import TlsMaterial


def config(**sections: Any) -> Any:
    return build_config(
        {"upstream": {"bootstrap_servers": ["b1:9093", "b2:9093"]}, **sections}, None
    )


def test_plaintext_by_default_and_bounded() -> None:
    settings = producer_settings(config(audit={"kafka": {"buffer_events": 500}}), ClientSecurity())
    assert settings["bootstrap.servers"] == "b1:9093,b2:9093"
    assert settings["security.protocol"] == "PLAINTEXT"
    assert settings["queue.buffering.max.messages"] == 500
    assert settings["message.timeout.ms"] == 10000
    assert settings["acks"] == "all"


def test_the_proxys_own_security_on_its_own_servers() -> None:
    security = ClientSecurity(
        "SASL_SSL",
        TlsMaterial(ca_pem="CA", check_hostname=False),
        "SCRAM-SHA-512",
        "u",
        "p",
    )
    settings = producer_settings(
        config(audit={"kafka": {"bootstrap_servers": "audit:9093"}}), security
    )
    assert settings["bootstrap.servers"] == "audit:9093"
    assert settings["security.protocol"] == "SASL_SSL"
    assert settings["ssl.ca.pem"] == "CA"
    assert settings["ssl.endpoint.identification.algorithm"] == "none"
    assert (settings["sasl.mechanisms"], settings["sasl.password"]) == ("SCRAM-SHA-512", "p")
    assert settings["acks"] == "all"  # the audit's own settings are not overridden


def test_closed_needs_a_sink_whose_failure_it_sees() -> None:
    with pytest.raises(
        ConfigError,
        match=r"audit: Value error, on_failure: closed needs audit\.file or audit\.kafka",
    ):
        config(audit={"on_failure": "closed", "stdout": True})


def test_envelope_wraps_the_record() -> None:
    record = {
        "decision_id": "d1",
        "time": "2026-11-24T00:00:00Z",
        "topic": "t",
        "decision": "denied",
    }
    event = envelope(record, "kafka-policy-proxy/p1")
    assert event == {
        "specversion": "1.0",
        "id": "d1",
        "source": "kafka-policy-proxy/p1",
        "type": "io.github.kafka-policy-proxy.decision",
        "time": "2026-11-24T00:00:00Z",
        "subject": "t",
        "datacontenttype": "application/json",
        "data": record,
    }
