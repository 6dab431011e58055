"""One ClientSecurity, several spellings in and out: the proxy YAML, librdkafka, Java clients."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from harness.throwaway_ca import ThrowawayCa
from kafka_policy_proxy.proxy.config import ConfigError, build_config
from kafka_policy_proxy.proxy.kafka_client.jaas import jaas_login
from kafka_policy_proxy.proxy.kafka_client.java_client import (
    consumer_options,
    java_client_properties,
)
from kafka_policy_proxy.proxy.kafka_client.librdkafka import librdkafka_config
from kafka_policy_proxy.proxy.kafka_client.properties import ClientPropertiesError
from kafka_policy_proxy.proxy.kafka_client.proxy_settings import proxy_client_security
from kafka_policy_proxy.proxy.kafka_client.security import ClientSecurity, client_security

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
TOKEN_URL = "https://idp.example.com/oauth2/token"


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> ThrowawayCa:
    ca = ThrowawayCa(tmp_path_factory.mktemp("ca"))
    ca.issue("client", server=False, key_password="key-pw")
    return ca


def sasl_ssl(ca: ThrowawayCa, password: str = 'p"w\\d') -> ClientSecurity:
    """SCRAM over mTLS; the password has a quote and a backslash, as passwords may."""
    quoted = password.replace("\\", "\\\\").replace('"', '\\"')
    return client_security(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": f'{SCRAM} required username="svc" password="{quoted}";',
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(ca.cert),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.certificate.chain": (ca.directory / "client.pem").read_text(),
            "ssl.keystore.key": (ca.directory / "client.key").read_text(),
            "ssl.key.password": "key-pw",
            "ssl.endpoint.identification.algorithm": "",
        }
    )


def config(**sections: Any) -> Any:
    return build_config({"upstream": {"bootstrap_servers": ["b1:9093"]}, **sections}, None)


# -- librdkafka (the audit producer)


def test_librdkafka_gets_pem_strings_and_the_login(ca: ThrowawayCa) -> None:
    security = sasl_ssl(ca)
    settings = librdkafka_config(security)
    assert settings["security.protocol"] == "SASL_SSL"
    assert settings["ssl.ca.pem"] == ca.cert.read_text()
    assert settings["ssl.certificate.pem"] == (ca.directory / "client.pem").read_text()
    assert settings["ssl.key.pem"].startswith("-----BEGIN PRIVATE KEY-----")
    assert settings["ssl.endpoint.identification.algorithm"] == "none"
    assert (settings["sasl.mechanisms"], settings["sasl.username"]) == ("SCRAM-SHA-512", "svc")
    assert settings["sasl.password"] == 'p"w\\d'
    # librdkafka parses the certificates and the key when the client is made.
    Producer({"bootstrap.servers": "127.0.0.1:1", **settings}).flush(0)


def test_librdkafka_oauthbearer_uses_its_oidc_client() -> None:
    security = client_security(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.token.endpoint.url": TOKEN_URL,
            "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer."
            'OAuthBearerLoginModule required clientId="proxy" clientSecret="s3cret";',
        }
    )
    settings = librdkafka_config(security)
    assert settings["sasl.oauthbearer.method"] == "oidc"
    assert settings["sasl.oauthbearer.token.endpoint.url"] == TOKEN_URL
    assert settings["sasl.oauthbearer.client.secret"] == "s3cret"


# -- Java clients (Spark's Kafka source, for `pipeline ingest --topic`)


def test_java_properties_are_pem_text_and_a_jaas_line_that_reads_back(ca: ThrowawayCa) -> None:
    props = java_client_properties(sasl_ssl(ca))
    assert props["ssl.truststore.type"] == props["ssl.keystore.type"] == "PEM"
    assert props["ssl.truststore.certificates"] == ca.cert.read_text()
    assert props["ssl.endpoint.identification.algorithm"] == ""
    module, options = jaas_login(props["sasl.jaas.config"])
    assert (module, options) == (SCRAM, {"username": "svc", "password": 'p"w\\d'})
    # The same properties read back into the same security.
    again = client_security(props)
    assert again.tls == sasl_ssl(ca).tls
    assert again.sasl_password == 'p"w\\d'


def test_kafka_options_take_tuning_only(ca: ThrowawayCa) -> None:
    options = consumer_options(sasl_ssl(ca), ["max.poll.records=100", "fetch.min.bytes=1"])
    assert options["max.poll.records"] == "100"
    assert options["security.protocol"] == "SASL_SSL"
    for option in ("sasl.jaas.config=x", "ssl.key.password=x", "security.protocol=SSL"):
        with pytest.raises(ClientPropertiesError, match="go in the --command-config file"):
            consumer_options(ClientSecurity(), [option])
    with pytest.raises(ClientPropertiesError, match="expected KEY=VALUE"):
        consumer_options(ClientSecurity(), ["novalue"])


# -- the proxy YAML: upstream.client_properties, or upstream.tls and cluster_state.sasl


def test_the_yaml_keys_and_a_properties_file_make_the_same_security(
    ca: ThrowawayCa, tmp_path: Path
) -> None:
    from_yaml = proxy_client_security(
        config(
            upstream={
                "bootstrap_servers": ["b1:9093"],
                "tls": {
                    "ca_file": str(ca.cert),
                    "cert_file": str(ca.directory / "client.pem"),
                    "key_file": str(ca.directory / "client.key"),
                    "key_password": "key-pw",
                    "check_hostname": False,
                },
            },
            cluster_state={
                "sasl": {"mechanism": "SCRAM-SHA-512", "username": "svc", "password": 'p"w\\d'}
            },
        )
    )
    properties = tmp_path / "client.properties"
    lines = [f"{k}={v}" for k, v in java_client_properties(sasl_ssl(ca)).items()]
    # .properties escapes: a backslash doubles; PEM's line breaks are \n, continued lines.
    escaped = [line.replace("\\", "\\\\").replace("\n", "\\n\\\n") for line in lines]
    properties.write_text("\n".join(escaped) + "\n")
    from_file = proxy_client_security(
        config(upstream={"bootstrap_servers": ["b1:9093"], "client_properties": str(properties)})
    )
    assert from_yaml.tls == from_file.tls == sasl_ssl(ca).tls
    assert (from_yaml.protocol, from_yaml.sasl_mechanism, from_yaml.sasl_password) == (
        from_file.protocol,
        from_file.sasl_mechanism,
        from_file.sasl_password,
    )


def test_plaintext_when_nothing_is_set() -> None:
    assert proxy_client_security(config()) == ClientSecurity()


def test_a_bad_properties_file_names_the_yaml_key_the_file_and_its_key(tmp_path: Path) -> None:
    properties = tmp_path / "client.properties"
    properties.write_text("security.protocol=SSL\nssl.truststore.location=/etc/t.jks\n")
    with pytest.raises(
        ConfigError,
        match=rf"^upstream.client_properties: {properties}: ssl.truststore.type: JKS",
    ):
        proxy_client_security(
            config(upstream={"bootstrap_servers": ["b:1"], "client_properties": str(properties)})
        )


@pytest.mark.parametrize(
    ("sections", "message"),
    [
        (
            {"upstream": {"bootstrap_servers": ["b:1"], "client_properties": "/c", "tls": {}}},
            "set upstream.client_properties or upstream.tls, not both",
        ),
        (
            {
                "upstream": {"bootstrap_servers": ["b:1"], "client_properties": "/c"},
                "cluster_state": {"sasl": {"mechanism": "PLAIN", "username": "u", "password": "p"}},
            },
            "set upstream.client_properties or cluster_state.sasl, not both",
        ),
    ],
)
def test_both_spellings_at_once_are_refused(sections: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_config(sections, None)
