"""Address filter: every broker address a response carries becomes a proxy listener."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol

from kafka_policy_proxy.codec.addresses import ADDRESS_APIS, BrokerAddresses, find_addresses
from kafka_policy_proxy.proxy.filters.api import Filter, Forward, RequestContext, Verdict


class BrokerListeners(Protocol):
    """What the rewriter needs from the server: the node map and its listeners."""

    def endpoint(self, node_id: int) -> tuple[str, int]:
        """The proxy address clients must use for a node."""
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

        def rewrite(body: bytes) -> bytes | Awaitable[bytes]:
            found = find_addresses(api_key, api_version, body)
            if found is None:
                return body
            if self._listeners.ready(found.nodes):
                return found.rewrite(self._listeners.endpoint)
            return self._bind_then_rewrite(found)

        return Forward(rewrite)

    async def _bind_then_rewrite(self, found: BrokerAddresses) -> bytes:
        # A new broker's listener is bound before any client is told about it.
        await self._listeners.ensure(found.nodes)
        return found.rewrite(self._listeners.endpoint)
