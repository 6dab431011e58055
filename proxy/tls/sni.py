"""SNI routing: the host name in a client's TLS ClientHello picks bootstrap or one broker.

The name is read in OpenSSL's server-name callback, during the handshake: a ClientHello
without a name, or with one that is neither the bootstrap name nor a known broker's, is
refused there with the `unrecognized_name` alert, before any Kafka byte is read. The route
of an accepted handshake is kept with its TLS object until the connection dials a broker.
"""

from __future__ import annotations

import re
import ssl
import weakref
from collections.abc import Callable
from typing import Literal

import structlog

from kafka_policy_proxy.proxy.config import SniConfig
from kafka_policy_proxy.proxy.metrics import SNI_REFUSED

log = structlog.get_logger("proxy.tls")

# The listener name of connections on the SNI port (metrics, audit, the address filter).
SNI_LISTENER = "sni"
BOOTSTRAP: Literal["bootstrap"] = "bootstrap"
Route = Literal["bootstrap"] | int


class SniRouter:
    """Maps SNI host names to bootstrap or a node id, and remembers each handshake's route."""

    def __init__(self, config: SniConfig, known: Callable[[int], bool]) -> None:
        """`known(node)`: whether the proxy knows that node's broker address now."""
        self._config = config
        self._known = known
        pattern = config.advertised_broker_address_pattern
        pattern_host = pattern.rpartition(":")[0] if ":" in pattern else pattern
        before, _, after = pattern_host.lower().partition("$(nodeid)")
        self._node_name = re.compile(re.escape(before) + r"(0|[1-9][0-9]{0,9})" + re.escape(after))
        self._routes: weakref.WeakKeyDictionary[ssl.SSLObject, Route] = weakref.WeakKeyDictionary()

    def route(self, server_name: str | None) -> Route | None:
        """The route for a name (DNS names are case-insensitive), or None to refuse it."""
        if not server_name:
            return None
        name = server_name.lower().rstrip(".")
        if name == self._config.bootstrap_host:
            return BOOTSTRAP
        match = self._node_name.fullmatch(name)
        if match is None:
            return None
        node = int(match.group(1))
        return node if self._known(node) else None

    def install(self, context: ssl.SSLContext) -> ssl.SSLContext:
        """Give the context the callback that routes and refuses; return it."""
        context.sni_callback = self._on_client_hello
        return context

    def route_of(self, ssl_object: ssl.SSLObject | None) -> Route:
        """The route chosen in this connection's handshake; LookupError if there is none."""
        route = None if ssl_object is None else self._routes.get(ssl_object)
        if route is None:
            raise LookupError("the TLS handshake chose no SNI route")
        return route

    def _on_client_hello(
        self, ssl_object: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, _: ssl.SSLContext
    ) -> int | None:
        route = self.route(server_name)
        if route is None:
            reason = "no_sni" if not server_name else "unknown_name"
            SNI_REFUSED.labels(reason=reason).inc()
            log.warning(
                "TLS client refused: its SNI host name routes nowhere (alert unrecognized_name)",
                server_name=server_name,
                bootstrap=self._config.bootstrap_host,
                brokers=self._config.advertised_broker_address_pattern,
            )
            return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME
        if isinstance(ssl_object, ssl.SSLObject):  # always, under asyncio's and uvloop's TLS
            self._routes[ssl_object] = route
        return None
