"""ClientSecurity as a Java Kafka client's properties: Spark's Kafka source (`ingest --topic`).

The values are resolved (no config providers left) and the stores are PEM text, so the Java
client needs no file of its own and no provider classes; they are handed to Spark in-process,
never on a command line.
"""

from __future__ import annotations

from collections.abc import Sequence

from kafka_policy_proxy.proxy.kafka_client.oauth import LOGIN_MODULE as OAUTH_LOGIN_MODULE
from kafka_policy_proxy.proxy.kafka_client.properties import ClientPropertiesError
from kafka_policy_proxy.proxy.kafka_client.security import LOGIN_MODULES, ClientSecurity

_OAUTH_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"


def java_client_properties(security: ClientSecurity) -> dict[str, str]:
    """The security properties of a Java Kafka client for `security`."""
    props = {"security.protocol": security.protocol}
    tls = security.tls
    if tls is not None:
        props["ssl.endpoint.identification.algorithm"] = "https" if tls.check_hostname else ""
        if tls.ca_pem is not None:
            props |= {"ssl.truststore.type": "PEM", "ssl.truststore.certificates": tls.ca_pem}
        if tls.cert_chain_pem is not None and tls.key_pem is not None:
            props |= {
                "ssl.keystore.type": "PEM",
                "ssl.keystore.certificate.chain": tls.cert_chain_pem,
                "ssl.keystore.key": tls.key_pem,
            }
    if security.oauth is not None:
        oauth = security.oauth
        options = {"clientId": oauth.client_id, "clientSecret": oauth.client_secret}
        options |= {"scope": oauth.scope} if oauth.scope else {}
        options |= {f"extension_{k}": v for k, v in oauth.extensions.items()}
        props |= {
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.token.endpoint.url": oauth.token_endpoint_url,
            "sasl.login.callback.handler.class": _OAUTH_HANDLER,
            "sasl.jaas.config": _jaas(OAUTH_LOGIN_MODULE, options),
        }
    elif security.sasl_mechanism is not None:
        assert security.sasl_username is not None and security.sasl_password is not None
        options = {"username": security.sasl_username, "password": security.sasl_password}
        props |= {
            "sasl.mechanism": security.sasl_mechanism,
            "sasl.jaas.config": _jaas(LOGIN_MODULES[security.sasl_mechanism], options),
        }
    return props


def _jaas(module: str, options: dict[str, str]) -> str:
    """A sasl.jaas.config value; quoted values escape backslashes and quotes (StreamTokenizer)."""

    def quoted(value: str) -> str:
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'

    return f"{module} required " + " ".join(f"{k}={quoted(v)}" for k, v in options.items()) + ";"


def consumer_options(security: ClientSecurity, options: Sequence[str]) -> dict[str, str]:
    """`security` as Java client properties, then KEY=VALUE tuning options; a security key
    among the options is refused (a secret on a command line shows in ps and shell history)."""
    tuning: dict[str, str] = {}
    for option in options:
        key, equals, value = option.partition("=")
        if not key or not equals:
            raise ClientPropertiesError(f"--kafka-option {option!r}: expected KEY=VALUE")
        if key.startswith(("security.", "ssl.", "sasl.", "config.providers")):
            raise ClientPropertiesError(
                f"--kafka-option {key}: security settings go in the --command-config file"
            )
        tuning[key] = value
    return java_client_properties(security) | tuning
