"""The proxy's own ClientSecurity from its YAML: upstream.client_properties, or the older keys.

upstream.client_properties names a Kafka client .properties file; upstream.tls and
cluster_state.sasl say the same in YAML and map into the same model (config.py refuses both
spellings at once).
"""

from __future__ import annotations

from pathlib import Path

from kafka_policy_proxy.proxy.config import ConfigError, ProxyConfig
from kafka_policy_proxy.proxy.kafka_client.properties import ClientPropertiesError
from kafka_policy_proxy.proxy.kafka_client.security import ClientSecurity, load_client_security
from kafka_policy_proxy.proxy.kafka_client.tls_material import tls_material

PROPERTIES_KEY = "upstream.client_properties"


def proxy_client_security(config: ProxyConfig) -> ClientSecurity:
    """The security of every connection the proxy makes for itself; ConfigError names the key."""
    path = config.upstream.client_properties
    if path is not None:
        try:
            return load_client_security(path)
        except ClientPropertiesError as exc:
            raise ConfigError(f"{PROPERTIES_KEY}: {exc}") from None
    tls, sasl = config.upstream.tls, config.cluster_state.sasl
    material = None
    if tls is not None:
        props = {
            "ssl.endpoint.identification.algorithm": "https" if tls.check_hostname else "",
            "ssl.enabled.protocols": tls.min_version,
        }
        if tls.ca_file is not None:
            props |= {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(tls.ca_file)}
        if tls.cert_file is not None and tls.key_file is not None:
            props |= {
                "ssl.keystore.type": "PEM",
                "ssl.keystore.certificate.chain": _text("cert_file", tls.cert_file),
                "ssl.keystore.key": _text("key_file", tls.key_file),
            }
            if tls.key_password is not None:
                props["ssl.key.password"] = tls.key_password.get_secret_value()
        try:
            material = tls_material(props)
        except ClientPropertiesError as exc:
            raise ConfigError(f"upstream.tls: {exc}") from None
    protocol = ("SASL_" if sasl else "") + ("SSL" if tls else "PLAINTEXT")
    if sasl is None:
        return ClientSecurity(protocol, material)
    return ClientSecurity(
        protocol, material, sasl.mechanism, sasl.username, sasl.password.get_secret_value()
    )


def _text(key: str, path: Path) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"upstream.tls.{key}: {path}: cannot read: {exc}") from None
