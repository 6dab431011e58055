"""SASL OAUTHBEARER with the client-credentials grant, configured as Kafka's Java client is.

Kafka's keys (KIP-768, and KIP-1139 from 4.1): sasl.oauthbearer.token.endpoint.url names the
token endpoint; the client id, secret and scope come from the sasl.oauthbearer.client.credentials.*
and sasl.oauthbearer.scope properties or, as before 4.1, from the OAuthBearerLoginModule's
clientId, clientSecret and scope options; SASL extensions are its extension_<name> options.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from urllib.parse import urlsplit

LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
# What the properties may name for the client-credentials login (Kafka's own classes only).
LOGIN_CALLBACK_HANDLERS = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
    # Its pre-3.4 home, still accepted by Kafka's clients.
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler",
)
JWT_RETRIEVERS = (
    "org.apache.kafka.common.security.oauthbearer.DefaultJwtRetriever",
    "org.apache.kafka.common.security.oauthbearer.ClientCredentialsJwtRetriever",
)
TOKEN_ENDPOINT_KEY = "sasl.oauthbearer.token.endpoint.url"
CLIENT_ID_KEY = "sasl.oauthbearer.client.credentials.client.id"
CLIENT_SECRET_KEY = "sasl.oauthbearer.client.credentials.client.secret"
SCOPE_KEY = "sasl.oauthbearer.scope"
EXTENSION_PREFIX = "extension_"
# RFC 7628 section 3.1: key = 1*(ALPHA); "auth" is the token itself. Values are VCHAR / SP / HTAB.
_RESERVED_EXTENSION = "auth"


@dataclass(frozen=True)
class OAuthSettings:
    """Where and how the proxy gets its OAUTHBEARER tokens (client-credentials grant)."""

    token_endpoint_url: str
    client_id: str
    client_secret: str = field(repr=False)  # resolved: config providers already applied
    scope: str | None
    extensions: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


def oauth_settings(props: Mapping[str, str]) -> OAuthSettings:
    """The OAUTHBEARER settings in Kafka client properties; a ValueError names the bad key."""
    from kafka_policy_proxy.proxy.cluster.command_config import _jaas_login

    for key, allowed in (
        ("sasl.login.callback.handler.class", LOGIN_CALLBACK_HANDLERS),
        ("sasl.oauthbearer.jwt.retriever.class", JWT_RETRIEVERS),
    ):
        value = props.get(key, "").strip()
        if value and value not in allowed:
            raise ValueError(
                f"{key}: {value} is not supported; the proxy fetches tokens with the "
                f"client-credentials grant as {allowed[0].rsplit('.', 1)[1]} does"
            )
    url = props.get(TOKEN_ENDPOINT_KEY, "").strip()
    if not url:
        raise ValueError(
            f"{TOKEN_ENDPOINT_KEY}: not set; OAUTHBEARER needs the token endpoint of the "
            "identity provider (the unsecured test login is not supported)"
        )
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(
            f"{TOKEN_ENDPOINT_KEY}: {url!r} is not an http(s) URL (a file: token is not supported)"
        )
    jaas = props.get("sasl.jaas.config", "").strip()
    options: dict[str, str] = {}
    if jaas:
        try:
            module, options = _jaas_login(jaas)
        except ValueError as exc:
            raise ValueError(f"sasl.jaas.config: {exc}") from None
        if module != LOGIN_MODULE:
            raise ValueError(
                f"sasl.jaas.config: login module {module} is not {LOGIN_MODULE}, which "
                "sasl.mechanism=OAUTHBEARER needs"
            )
    client_id = _credential(props, options, CLIENT_ID_KEY, "clientId")
    secret = _credential(props, options, CLIENT_SECRET_KEY, "clientSecret")
    scope = props.get(SCOPE_KEY, "").strip() or options.get("scope", "").strip() or None
    extensions = {
        name[len(EXTENSION_PREFIX) :]: value
        for name, value in options.items()
        if name.startswith(EXTENSION_PREFIX)
    }
    for name, value in extensions.items():
        if name == _RESERVED_EXTENSION or not name.isascii() or not name.isalpha():
            raise ValueError(
                f"sasl.jaas.config: extension name {name!r} is invalid (letters only, not 'auth')"
            )
        if any(not (char in "\t " or "!" <= char <= "~") for char in value):
            raise ValueError(
                f"sasl.jaas.config: extension {name}'s value has characters RFC 7628 forbids"
            )
    return OAuthSettings(url, client_id, secret, scope, MappingProxyType(extensions))


def _credential(props: Mapping[str, str], options: Mapping[str, str], key: str, opt: str) -> str:
    """A property, else the login module's option (Kafka 4.1 prefers the property)."""
    value = props.get(key, "").strip() or options.get(opt, "").strip()
    if not value:
        raise ValueError(
            f"{key}: not set (nor the {opt} option of sasl.jaas.config); the client-credentials "
            "grant needs it"
        )
    return value


def oauth_librdkafka(settings: OAuthSettings) -> dict[str, str]:
    """The same login for confluent-kafka (librdkafka's built-in OIDC client-credentials)."""
    config = {
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.token.endpoint.url": settings.token_endpoint_url,
        "sasl.oauthbearer.client.id": settings.client_id,
        "sasl.oauthbearer.client.secret": settings.client_secret,
    }
    if settings.scope:
        config["sasl.oauthbearer.scope"] = settings.scope
    if settings.extensions:
        config["sasl.oauthbearer.extensions"] = ",".join(
            f"{name}={value}" for name, value in settings.extensions.items()
        )
    return config
