"""All three admin clients at once, with the same credentials and settings."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tests.integration.admin_clients.confluent_admin import ConfluentAdmin
from tests.integration.admin_clients.interface import AdminHarness
from tests.integration.admin_clients.java_admin import JavaAdmin
from tests.integration.admin_clients.kafka_python_admin import KafkaPythonAdmin
from tests.integration.admin_clients.model import CLIENT_NAMES, Sasl


def _sasl_settings(sasl: Sasl) -> dict[str, dict[str, Any]]:
    module = "plain.PlainLoginModule" if sasl.mechanism == "PLAIN" else "scram.ScramLoginModule"
    jaas = (
        f"org.apache.kafka.common.security.{module} required "
        f'username="{sasl.username}" password="{sasl.password}";'
    )
    return {
        "java": {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": sasl.mechanism,
            "sasl.jaas.config": jaas,
        },
        "confluent": {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": sasl.mechanism,
            "sasl.username": sasl.username,
            "sasl.password": sasl.password,
        },
        "kafka-python": {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": sasl.mechanism,
            "sasl_plain_username": sasl.username,
            "sasl_plain_password": sasl.password,
        },
    }


def admin_clients(
    bootstrap: str,
    classpath: str,
    extra: Mapping[str, Mapping[str, Any]] | None = None,
    sasl: Sasl | None = None,
) -> dict[str, AdminHarness]:
    """One harness per client, keyed by CLIENT_NAMES; `extra` adds raw settings per client name."""
    settings = _sasl_settings(sasl) if sasl else {name: {} for name in CLIENT_NAMES}
    for name, values in (extra or {}).items():
        settings[name] = {**settings[name], **values}
    clients: dict[str, AdminHarness] = {}
    try:
        clients["java"] = JavaAdmin(bootstrap, classpath, settings["java"])
        clients["confluent"] = ConfluentAdmin(bootstrap, settings["confluent"])
        clients["kafka-python"] = KafkaPythonAdmin(bootstrap, **settings["kafka-python"])
    except BaseException:
        close_all(clients.values())
        raise
    return clients


def close_all(clients: Iterable[AdminHarness]) -> None:
    """Close every client, even if one fails; the first failure is raised afterwards."""
    failures = []
    for client in clients:
        try:
            client.close()
        except Exception as exc:
            failures.append(exc)
    if failures:
        raise failures[0]
