"""The proxy's connections to the cluster for reading facts: a few, so that one slow read
does not hold every judgement behind it.

A connection answers one request at a time (proxy/cluster/client.py), so each read takes the
connection with the fewest reads on it. A big read (more than SMALL_READ keys: many topic ids,
say) never takes the first connection when there are others: small reads, which most single
topic requests make, always have one connection that only small reads queue on.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Sequence

from kafka_policy_proxy.proxy.cluster.client import SaslLogin
from kafka_policy_proxy.proxy.cluster.connection import ClusterConnection
from kafka_policy_proxy.proxy.kafka_client.token_source import TokenSource

# Keys (topics, ids, resources) up to which a read counts as small.
SMALL_READ = 16


class ConnectionPool:
    """`size` ClusterConnections to the bootstrap servers; reads lease the least busy one."""

    def __init__(
        self,
        bootstrap: Sequence[tuple[str, int]],
        size: int = 2,
        *,
        request_timeout_s: float = 10.0,
        sasl: SaslLogin | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        if size < 1:
            raise ValueError("the cluster-state pool needs at least one connection")
        self.connections = tuple(
            ClusterConnection(bootstrap, request_timeout_s=request_timeout_s, sasl=sasl, tls=tls)
            for _ in range(size)
        )
        self._busy = [0] * size
        self._sasl = sasl

    @contextlib.asynccontextmanager
    async def lease(self, keys: int) -> AsyncIterator[ClusterConnection]:
        """The connection a read of `keys` keys goes on, held for the read's length."""
        first = 1 if keys > SMALL_READ and len(self.connections) > 1 else 0
        index = min(range(first, len(self.connections)), key=self._busy.__getitem__)
        self._busy[index] += 1
        try:
            yield self.connections[index]
        finally:
            self._busy[index] -= 1

    @property
    def last_read(self) -> float | None:
        """Loop time of the last answer from the cluster, on any connection."""
        times = [c.last_read for c in self.connections if c.last_read is not None]
        return max(times) if times else None

    @property
    def last_error(self) -> str | None:
        """Why the last read failed on a connection that has not read since."""
        return next((c.last_error for c in self.connections if c.last_error), None)

    async def close(self) -> None:
        """Close every connection (and stop refreshing OAUTHBEARER tokens for them)."""
        for connection in self.connections:
            await connection.close()
        if isinstance(self._sasl, TokenSource):
            self._sasl.close()
