"""ClientSecurity: how the proxy's own Kafka clients connect, from Kafka client properties.

One typed model for the cluster-state reader, the audit producer, `snapshot` and `pipeline
ingest`. Keys under security., ssl. and sasl. that the proxy cannot honour (Java classes,
Kerberos, JKS stores, cipher names) are refused naming the key; other keys (client.id,
request.timeout.ms, ...) are tuning for Java clients and are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kafka_policy_proxy.proxy.kafka_client.jaas import jaas_login
from kafka_policy_proxy.proxy.kafka_client.oauth import OAuthSettings, oauth_settings
from kafka_policy_proxy.proxy.kafka_client.properties import (
    ClientPropertiesError,
    read_properties,
)
from kafka_policy_proxy.proxy.kafka_client.tls_material import TlsMaterial, tls_material

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
MECHANISMS = (*LOGIN_MODULES, "OAUTHBEARER")
# The security keys the proxy reads; the oauth keys are read by oauth_settings.
HONOURED = {
    "security.protocol",
    "sasl.mechanism",
    "sasl.jaas.config",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.password",
    "ssl.truststore.certificates",
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
    "ssl.enabled.protocols",
    "ssl.protocol",
}
# Security-prefixed keys that tune a Java client without changing who it trusts or is.
IGNORED_PREFIXES = (
    "sasl.login.refresh.",
    "sasl.login.retry.backoff.",
    "sasl.login.connect.timeout.ms",
    "sasl.login.read.timeout.ms",
    "sasl.oauthbearer.",  # oauth_settings reads the ones it honours
    "ssl.keymanager.algorithm",
    "ssl.trustmanager.algorithm",
    "ssl.secure.random.implementation",
)
OAUTH_CLASS_KEYS = ("sasl.login.callback.handler.class",)  # checked by oauth_settings
_SECURITY_PREFIXES = ("security.", "ssl.", "sasl.")


@dataclass(frozen=True)
class ClientSecurity:
    """Who the proxy is to the brokers and whom it trusts."""

    protocol: str = "PLAINTEXT"
    tls: TlsMaterial | None = None
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    oauth: OAuthSettings | None = None


def client_security(props: Mapping[str, str]) -> ClientSecurity:
    """The ClientSecurity that resolved client properties ask for; refuses what it cannot be."""
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in PROTOCOLS:
        raise ClientPropertiesError(
            f"security.protocol: unknown protocol {protocol!r}; use one of {', '.join(PROTOCOLS)}"
        )
    mechanism = props.get("sasl.mechanism", "GSSAPI").strip() if "SASL" in protocol else None
    _refuse_unknown(props, mechanism)
    tls = tls_material(props) if protocol.endswith("SSL") else None
    if mechanism is None:
        # As in Kafka's clients, the sasl.* settings do not apply without SASL.
        return ClientSecurity(protocol, tls)
    if mechanism not in MECHANISMS:
        default = " (Kafka's default when unset: Kerberos)" if "sasl.mechanism" not in props else ""
        raise ClientPropertiesError(
            f"sasl.mechanism: {mechanism}{default} is not supported; use one of "
            f"{', '.join(MECHANISMS)}"
        )
    if mechanism == "OAUTHBEARER":
        try:
            oauth = oauth_settings(props)
        except ValueError as exc:
            raise ClientPropertiesError(str(exc)) from None
        return ClientSecurity(protocol, tls, mechanism, oauth=oauth)
    username, password = _login(props, mechanism)
    return ClientSecurity(protocol, tls, mechanism, username, password)


def load_client_security(path: Path) -> ClientSecurity:
    """Read a client .properties file into ClientSecurity; errors name the file and the key."""
    props = read_properties(path)
    try:
        return client_security(props)
    except ClientPropertiesError as exc:
        raise ClientPropertiesError(f"{path}: {exc}") from None


def _refuse_unknown(props: Mapping[str, str], mechanism: str | None) -> None:
    for key in props:
        if not key.startswith(_SECURITY_PREFIXES) or key in HONOURED:
            continue
        if key.startswith(IGNORED_PREFIXES):
            continue
        if key in OAUTH_CLASS_KEYS and mechanism == "OAUTHBEARER":
            continue
        why = (
            "it plugs a Java class into the client, which only a JVM can load"
            if key.endswith((".class", ".classes")) or key == "security.providers"
            else "it changes the connection's security and the proxy cannot honour it"
        )
        raise ClientPropertiesError(f"{key}: not supported: {why}; remove it")


def _login(props: Mapping[str, str], mechanism: str) -> tuple[str, str]:
    """The username and password of a PLAIN or SCRAM login module."""
    jaas = props.get("sasl.jaas.config", "").strip()
    if not jaas:
        raise ClientPropertiesError(
            f"sasl.jaas.config: not set; {mechanism} needs it (a JAAS file named by "
            "java.security.auth.login.config is not supported)"
        )
    try:
        module, options = jaas_login(jaas)
    except ValueError as exc:
        raise ClientPropertiesError(f"sasl.jaas.config: {exc}") from None
    # Either module does for either mechanism, as in Kafka: both only hand over the password.
    if module not in LOGIN_MODULES.values():
        raise ClientPropertiesError(
            f"sasl.jaas.config: login module {module} is not supported for "
            f"sasl.mechanism={mechanism}; use {LOGIN_MODULES[mechanism]}"
        )
    # Other options are ignored, as Kafka's login modules ignore them; this one changes the login.
    if options.get("tokenauth", "").lower() == "true":
        raise ClientPropertiesError(
            "sasl.jaas.config: tokenauth=true (delegation tokens) is not supported"
        )
    for option in ("username", "password"):
        if option not in options:
            raise ClientPropertiesError(f"sasl.jaas.config: the {option} option is missing")
    return options["username"], options["password"]
