"""Address filter: every broker address a response carries becomes a proxy listener."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from kafka_policy_proxy.codec.addresses import ADDRESS_APIS, BrokerAddresses, find_addresses
from kafka_policy_proxy.proxy.filters.api import Filter, Forward, RequestContext, Verdict
from kafka_policy_proxy.proxy.tls.sni import SNI_LISTENER


class BrokerListeners(Protocol):
    """What the rewriter needs from the server: the node map and its listeners."""

    def endpoint(self, node_id: int) -> tuple[str, int]:
        """The proxy address clients must use for a node."""
        ...

    def sni_endpoint(self, node_id: int) -> tuple[str, int]:
        """The address clients of the SNI listener must use for a node (its host name)."""
        ...

    def ready(self, nodes: dict[int, tuple[str, int]]) -> bool:
        """Whether every node has a listener and a known broker address."""
        ...

    async def ensure(self, nodes: dict[int, tuple[str, int]]) -> None:
        """Record the nodes' broker addresses and bind any missing listener."""
        ...


class AddressRewriteFilter(Filter):
    """Rewrites Metadata, FindCoordinator, DescribeCluster and share-API node endpoints."""

    api_keys = ADDRESS_APIS

    def __init__(self, listeners: BrokerListeners) -> None:
        self._listeners = listeners

    def on_request(self, ctx: RequestContext) -> Verdict:
        """Forward the request; rewrite the addresses in its response."""
        api_key, api_version = ctx.api_key, ctx.api_version
        # A client of the SNI port is sent each broker's host name on that port.
        endpoint = (
            self._listeners.sni_endpoint
            if ctx.listener == SNI_LISTENER
            else self._listeners.endpoint
        )

        def rewrite(body: bytes) -> bytes | Awaitable[bytes]:
            found = find_addresses(api_key, api_version, body)
            if found is None:
                return body
            if self._listeners.ready(found.nodes):
                return found.rewrite(endpoint)
            return self._bind_then_rewrite(found, endpoint)

        return Forward(rewrite)

    async def _bind_then_rewrite(
        self, found: BrokerAddresses, endpoint: Callable[[int], tuple[str, int]]
    ) -> bytes:
        # A new broker's listener is bound (and its address known) before a client hears of it.
        await self._listeners.ensure(found.nodes)
        return found.rewrite(endpoint)
