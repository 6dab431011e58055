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

from kafka_policy_proxy.proxy.kafka_client.jaas import jaas_login

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
class RefreshRules:
    """Kafka's sasl.login.refresh.*, retry backoff and timeout settings, in seconds."""

    window_factor: float = 0.8
    window_jitter: float = 0.05
    min_period_s: float = 60.0
    buffer_s: float = 300.0
    retry_backoff_s: float = 0.1
    retry_backoff_max_s: float = 10.0
    timeout_s: float = 10.0

    def refresh_at(self, start: float, expiry: float, now: float, rand: float) -> float:
        """When to refresh a token valid from `start` to `expiry` (as Kafka's refreshing login)."""
        refresh = start + (expiry - start) * (self.window_factor + self.window_jitter * rand)
        # Kafka ignores both when their sum exceeds the token's remaining lifetime.
        if self.min_period_s + self.buffer_s <= expiry - now:
            refresh = min(max(refresh, now + self.min_period_s), expiry - self.buffer_s)
        return refresh


# key -> (field, lowest, highest, scale to seconds); Kafka's names, ranges and units.
_REFRESH_KEYS = {
    "sasl.login.refresh.window.factor": ("window_factor", 0.5, 1.0, 1.0),
    "sasl.login.refresh.window.jitter": ("window_jitter", 0.0, 0.25, 1.0),
    "sasl.login.refresh.min.period.seconds": ("min_period_s", 0, 900, 1.0),
    "sasl.login.refresh.buffer.seconds": ("buffer_s", 0, 3600, 1.0),
    "sasl.login.retry.backoff.ms": ("retry_backoff_s", 0, 3_600_000, 0.001),
    "sasl.login.retry.backoff.max.ms": ("retry_backoff_max_s", 0, 3_600_000, 0.001),
    # urllib has one timeout for connecting and reading: the larger of the two is used.
    "sasl.login.connect.timeout.ms": ("timeout_s", 1, 3_600_000, 0.001),
    "sasl.login.read.timeout.ms": ("timeout_s", 1, 3_600_000, 0.001),
}


@dataclass(frozen=True)
class OAuthSettings:
    """Where and how the proxy gets its OAUTHBEARER tokens (client-credentials grant)."""

    token_endpoint_url: str
    client_id: str
    client_secret: str = field(repr=False)  # resolved: config providers already applied
    scope: str | None
    extensions: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    refresh: RefreshRules = field(default_factory=RefreshRules)


def oauth_settings(props: Mapping[str, str]) -> OAuthSettings:
    """The OAUTHBEARER settings in Kafka client properties; a ValueError names the bad key."""
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
    assertion = sorted(key for key in props if key.startswith("sasl.oauthbearer.assertion."))
    if assertion:
        raise ValueError(
            f"{assertion[0]}: the jwt-bearer grant is not supported; the proxy uses the "
            "client-credentials grant (client id and secret)"
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
            module, options = jaas_login(jaas)
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
    return OAuthSettings(
        url, client_id, secret, scope, MappingProxyType(extensions), refresh_rules(props)
    )


def refresh_rules(props: Mapping[str, str]) -> RefreshRules:
    """The token refresh settings in Kafka client properties; a ValueError names the bad key."""
    values: dict[str, float] = {}
    for key, (name, lowest, highest, scale) in _REFRESH_KEYS.items():
        text = props.get(key, "").strip()
        if not text:
            continue
        try:
            number = float(text) if isinstance(lowest, float) else int(text)
        except ValueError:
            raise ValueError(f"{key}: {text!r} is not a number") from None
        if not lowest <= number <= highest:
            raise ValueError(f"{key}: {text} is outside [{lowest}, {highest}]")
        values[name] = max(values.get(name, 0.0), number * scale)
    rules = RefreshRules(**values)
    if rules.retry_backoff_max_s < rules.retry_backoff_s:
        raise ValueError(
            "sasl.login.retry.backoff.max.ms: smaller than sasl.login.retry.backoff.ms"
        )
    return rules


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
