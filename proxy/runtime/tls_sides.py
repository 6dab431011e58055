"""The proxy's TLS contexts, each rebuilt from its files when they change or on SIGHUP.

Sides: `listener` (listeners.tls, on the bootstrap and node ports), `sni` (the same files,
with the SNI router's callback), `upstream` (upstream.tls, or the TLS of
upstream.client_properties and the stores that file names).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from pathlib import Path

from kafka_policy_proxy.proxy.cluster.login import tls_of
from kafka_policy_proxy.proxy.config import (
    ConfigError,
    ProxyConfig,
    TlsConfig,
    UpstreamTlsConfig,
)
from kafka_policy_proxy.proxy.kafka_client.properties import read_properties
from kafka_policy_proxy.proxy.kafka_client.proxy_settings import proxy_client_security
from kafka_policy_proxy.proxy.kafka_client.security import ClientSecurity
from kafka_policy_proxy.proxy.tls.broker_side import client_context
from kafka_policy_proxy.proxy.tls.client_side import server_context
from kafka_policy_proxy.proxy.tls.reloading import ReloadingContext, Side
from kafka_policy_proxy.proxy.tls.sni import SniRouter

# upstream.client_properties has no interval of its own: upstream.tls's default.
_PROPERTIES_RELOAD_INTERVAL_S = UpstreamTlsConfig.model_fields["reload_interval_s"].default
_STORE_KEYS = ("ssl.truststore.location", "ssl.keystore.location")


class TlsSides:
    """Builds each side's context once (a bad file stops the start), then keeps it current."""

    def __init__(self) -> None:
        self._sides: list[tuple[ReloadingContext, float]] = []

    def listener(self, tls: TlsConfig, sni: SniRouter | None = None) -> ssl.SSLContext:
        """The listeners' context; with `sni`, the SNI port's, which routes in the handshake."""
        if sni is None:
            return self._files("listener", lambda: server_context(tls), tls)
        return self._files("sni", lambda: sni.install(server_context(tls)), tls)

    def upstream(self, config: ProxyConfig, security: ClientSecurity) -> ssl.SSLContext | None:
        """The context of connections to the brokers, None for PLAINTEXT and SASL_PLAINTEXT."""
        tls = config.upstream.tls
        if tls is not None:
            return self._files("upstream", lambda: client_context(tls), tls)
        path = config.upstream.client_properties
        if path is None or security.tls is None:
            return tls_of(security)
        props = read_properties(path)
        stores = [Path(props[k]) for k in _STORE_KEYS if props.get(k)]

        def build() -> ssl.SSLContext:
            context = tls_of(proxy_client_security(config))
            if context is None:
                raise ConfigError(f"upstream.client_properties: {path}: no longer SSL or SASL_SSL")
            return context

        def presented() -> bytes | None:
            material = proxy_client_security(config).tls
            chain = None if material is None else material.cert_chain_pem
            return None if chain is None else chain.encode()

        side = ReloadingContext("upstream", build, [path, *stores], presented)
        self._sides.append((side, _PROPERTIES_RELOAD_INTERVAL_S))
        return side.context

    def reload(self) -> None:
        """Rebuild every side from its files (SIGHUP); a bad file keeps that side's context."""
        for side, _ in self._sides:
            side.reload()

    def watchers(self) -> list[asyncio.Task[None]]:
        """Start polling each side's files (reload_interval_s; 0: SIGHUP only)."""
        return [
            asyncio.ensure_future(side.watch(interval))
            for side, interval in self._sides
            if interval > 0
        ]

    def _files(
        self,
        name: Side,
        build: Callable[[], ssl.SSLContext],
        tls: TlsConfig | UpstreamTlsConfig,
    ) -> ssl.SSLContext:
        files = [f for f in (tls.ca_file, tls.cert_file, tls.key_file) if f is not None]
        presented = None if tls.cert_file is None else tls.cert_file.read_bytes
        side = ReloadingContext(name, build, files, presented)
        self._sides.append((side, tls.reload_interval_s))
        return side.context
