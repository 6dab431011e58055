"""Broker discovery: a Metadata request for no topics names every broker, and the cluster.

The server discovers the brokers behind its listeners this way at start; the cluster-state
reader asks the same to learn the broker ids. Both go through `BrokerDiscovery.learn`, which
also remembers the cluster id the decision records carry.
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import structlog
from kio.schema.metadata.v12.request import MetadataRequest

from kafka_policy_proxy.codec.errors import CodecError
from kafka_policy_proxy.proxy.cluster.client import KafkaClient, SaslLogin
from kafka_policy_proxy.proxy.cluster.requests import metadata_request

log = structlog.get_logger("proxy.discovery")


@dataclass(frozen=True, slots=True)
class Brokers:
    """The cluster's id and each node's address (as the listener that was asked advertises it)."""

    cluster_id: str | None
    nodes: dict[int, tuple[str, int]]


def brokers_request() -> MetadataRequest:
    """The request that discovers the brokers: Metadata for no topics."""
    return metadata_request(())


class BrokerDiscovery:
    """Learns the brokers and the cluster id from Metadata responses."""

    def __init__(self) -> None:
        self.cluster_id: str | None = None  # None until a broker has said it

    def learn(self, response: Any) -> Brokers:
        """The brokers a Metadata response names; remembers its cluster id."""
        if response.cluster_id:
            self.cluster_id = str(response.cluster_id)
        nodes = {int(b.node_id): (str(b.host), int(b.port)) for b in response.brokers}
        return Brokers(self.cluster_id, nodes)

    async def discover(
        self,
        servers: Sequence[tuple[str, int]],
        connect_timeout_s: float,
        sasl: SaslLogin | None,
        tls: ssl.SSLContext | None = None,
    ) -> Brokers | None:
        """Ask each bootstrap server in turn until one answers; None if none does."""
        for host, port in servers:
            try:
                client = await KafkaClient.connect(
                    host, port, connect_timeout_s, sasl=sasl, tls=tls
                )
            except (OSError, TimeoutError) as exc:
                log.warning(
                    "bootstrap server unreachable", broker=f"{host}:{port}", detail=str(exc)
                )
                continue
            try:
                return self.learn(await client.request(brokers_request()))
            except (OSError, TimeoutError, EOFError, CodecError) as exc:
                log.warning("metadata request failed", broker=f"{host}:{port}", detail=str(exc))
            finally:
                await client.close()
        return None
