"""The proxy's own connection to the cluster, for reading facts: one broker at a time.

One connection to one of the bootstrap servers, opened when first needed. Any failure drops
it, and the next connection goes to the next server. A read whose connection broke is tried
once more on a new one (a reused connection may have gone stale, and a fresh one may have met
a broker that is stopping or starting); a read that timed out is not.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from kafka_policy_proxy.codec.errors import CodecError
from kafka_policy_proxy.proxy.cluster.client import (
    KafkaClient,
    SaslAuthenticationError,
    SaslLogin,
)
from kafka_policy_proxy.proxy.cluster.unavailable import ClusterStateUnavailable, ReadFailed
from kafka_policy_proxy.proxy.metrics import (
    CLUSTER_STATE_READ_KEYS,
    CLUSTER_STATE_READS,
    CLUSTER_STATE_REQUESTS,
)

V = TypeVar("V")


class ClusterConnection:
    """Sends requests to one of the bootstrap servers; failures name what was being read."""

    def __init__(
        self,
        bootstrap: Sequence[tuple[str, int]],
        *,
        request_timeout_s: float = 10.0,
        sasl: SaslLogin | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        if not bootstrap:
            raise ValueError("ClusterStateReader needs at least one bootstrap server")
        self._bootstrap = tuple(bootstrap)
        self._next_server = 0
        self._timeout = request_timeout_s
        self._sasl = sasl
        self._tls = tls
        self.last_read: float | None = None  # loop time of the last answer from the cluster
        self.last_error: str | None = None  # why the last read failed, until one succeeds
        self._client: KafkaClient | None = None
        self.address = ""  # host:port of the server connected to
        self._reused = False  # the connection has answered before, so it may have gone stale
        self.node_id: int | None = None  # the broker connected to, once a read has learnt it
        self._connect_lock = asyncio.Lock()

    async def read(self, what: str, fetch: Callable[[], Awaitable[V]]) -> V:
        """Run `fetch`, once more if its connection broke; any failure names `what`."""
        try:
            try:
                return await fetch()
            except ReadFailed as exc:
                if not exc.retry:
                    raise
                return await fetch()
        except ReadFailed as exc:
            CLUSTER_STATE_REQUESTS.labels(result="error").inc()
            self.last_error = f"cannot read {what} from the cluster: {exc}"
            raise ClusterStateUnavailable(self.last_error) from None
        # Fail closed on anything else too (a broker answer this code did not expect).
        except Exception as exc:
            CLUSTER_STATE_REQUESTS.labels(result="error").inc()
            self.last_error = f"cannot read {what} from the cluster: {type(exc).__name__}: {exc}"
            raise ClusterStateUnavailable(self.last_error) from exc

    async def call(self, message: Any, client: KafkaClient | None = None) -> Any:
        """Send one request on the shared connection (or `client`, if it is still the one);
        any failure drops the connection and raises ReadFailed."""
        if client is None:
            client = await self.connected()
        _count(message)
        reused = self._reused
        try:
            response = await client.request(message)
        except (OSError, EOFError, CodecError) as exc:
            address = self.address
            await self._disconnect(client)
            name = type(message).__name__.removesuffix("Request")
            # A timeout is not retried: the caller has waited long enough. A broken connection
            # is, once: a reused one may have gone stale, and a fresh one may have met a
            # broker that is stopping or starting while another server is there to try.
            broken = not isinstance(exc, (TimeoutError, CodecError))
            retry = broken and (reused or len(self._bootstrap) > 1)
            raise ReadFailed(f"{name} to {address} failed: {_describe(exc)}", retry=retry) from None
        self._reused = True
        self.last_read = asyncio.get_running_loop().time()
        self.last_error = None
        return response

    async def connected(self) -> KafkaClient:
        """The open connection, or a new one to the next server that answers."""
        async with self._connect_lock:
            if self._client is not None and self._client.session_expired:
                # Idle past the broker's session limit (KIP-368): the broker closes it on the
                # next request, so start afresh instead of failing one.
                await self._disconnect(self._client)
            if self._client is not None:
                return self._client
            failures = []
            for _ in self._bootstrap:
                host, port = self._bootstrap[self._next_server]
                try:
                    self._client = await KafkaClient.connect(
                        host, port, self._timeout, self._sasl, self._tls
                    )
                except SaslAuthenticationError as exc:
                    # The credentials are the cluster's: another server would refuse them too.
                    raise ReadFailed(f"{host}:{port}: {exc}") from None
                except (OSError, EOFError, CodecError) as exc:
                    failures.append(f"{host}:{port}: {_describe(exc)}")
                    self._next_server = (self._next_server + 1) % len(self._bootstrap)
                    continue
                self.address = f"{host}:{port}"
                self._reused = False
                return self._client
            raise ReadFailed(f"cannot connect to any bootstrap server ({'; '.join(failures)})")

    async def close(self) -> None:
        """Close the connection, if one is open."""
        await self._disconnect()

    async def _disconnect(self, client: KafkaClient | None = None) -> None:
        """Close the connection (if it is still `client`); the next one goes to the next server."""
        current = self._client
        if current is None or (client is not None and client is not current):
            return
        self._client = None
        self.node_id = None
        self._next_server = (self._next_server + 1) % len(self._bootstrap)
        await current.close()


def _count(message: Any) -> None:
    """Count a request and the keys it names (None, all topics, counts as one)."""
    name = type(message).__name__.removesuffix("Request")
    api = name if name in ("Metadata", "DescribeConfigs") else "other"
    named = getattr(message, "topics", None) or getattr(message, "resources", None)
    CLUSTER_STATE_READS.labels(api=api).inc()
    CLUSTER_STATE_READ_KEYS.labels(api=api).inc(len(named) if named is not None else 1)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, EOFError):
        return "connection closed by the broker"
    return str(exc) or type(exc).__name__
