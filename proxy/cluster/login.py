"""What the proxy's asyncio connections need from a ClientSecurity: the login and the TLS."""

from __future__ import annotations

import ssl

from kafka_policy_proxy.proxy.cluster.client import SaslCredentials, SaslLogin
from kafka_policy_proxy.proxy.kafka_client.security import ClientSecurity
from kafka_policy_proxy.proxy.kafka_client.ssl_context import tls_context
from kafka_policy_proxy.proxy.kafka_client.token_source import TokenSource


def sasl_login(security: ClientSecurity) -> SaslLogin | None:
    """The SASL login `security` asks for: a password, OAUTHBEARER tokens, or none."""
    if security.oauth is not None:
        return TokenSource(security.oauth)
    if security.sasl_mechanism is None:
        return None
    assert security.sasl_username is not None and security.sasl_password is not None
    return SaslCredentials(security.sasl_mechanism, security.sasl_username, security.sasl_password)


def tls_of(security: ClientSecurity) -> ssl.SSLContext | None:
    """The TLS context for SSL and SASL_SSL, None for the plaintext protocols."""
    return None if security.tls is None else tls_context(security.tls)
