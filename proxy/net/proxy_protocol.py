"""`listeners.proxy_protocol: required`: each connection starts with a PROXY protocol header.

The header comes before anything else, the TLS ClientHello included, so this layer sits in
front of the listener's own protocol (TLS, or the Kafka connection): it reads the header, then
hands the socket over, with the client's address (the header's) as the transport's
`peername`, and the load balancer's as `proxied_by`. Everything that names the client (the
logs, the audit's `client`, the per-client admission and budget keys) reads `peername`. A
connection without a valid header in time is closed and logged with the peer's address.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Callable, Sequence
from typing import Any

import structlog

from kafka_policy_proxy.codec.proxy_header import (
    ProxyHeader,
    ProxyHeaderError,
    Reason,
    parse_proxy_header,
)
from kafka_policy_proxy.proxy.metrics import PROXY_PROTOCOL_REJECTED

log = structlog.get_logger("proxy.net.proxy_protocol")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def proxy_protocol_listener(
    factory: Callable[[], asyncio.BaseProtocol],
    *,
    listener: str,
    timeout_s: float,
    allowed_peers: Sequence[Network] = (),
) -> Callable[[], asyncio.Protocol]:
    """The listener's protocol factory behind a PROXY header reader (for `create_server`)."""
    return lambda: _HeaderReader(factory, listener, timeout_s, tuple(allowed_peers))


class _HeaderReader(asyncio.Protocol):
    """Reads one PROXY header, then gives the connection to the listener's protocol."""

    def __init__(
        self,
        factory: Callable[[], asyncio.BaseProtocol],
        listener: str,
        timeout_s: float,
        allowed_peers: tuple[Network, ...],
    ) -> None:
        self._factory = factory
        self._listener = listener
        self._timeout_s = timeout_s
        self._allowed_peers = allowed_peers
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._timer: asyncio.TimerHandle | None = None
        self._peer = "?"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's are not subclasses
        peer = transport.get_extra_info("peername")
        self._peer = _address(peer) or "?"
        if self._allowed_peers and not _within(peer, self._allowed_peers):
            self._reject("peer", "not a listeners.proxy_protocol_allowed_peers address")
            return
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self._timeout_s, self._timed_out)

    def data_received(self, data: bytes) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        self._buffer += data
        try:
            header = parse_proxy_header(self._buffer)
        except ProxyHeaderError as exc:
            self._reject(exc.reason, str(exc))
            return
        if header is not None:
            self._hand_over(transport, header)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is not None:  # still ours: the client left before a whole header
            self._cancel_timer()
            if self._buffer:
                self._count("incomplete", "the connection closed inside the PROXY header")
            self._transport = None

    def _hand_over(self, transport: asyncio.Transport, header: ProxyHeader) -> None:
        self._cancel_timer()
        rest = bytes(self._buffer[header.length :])
        self._buffer = bytearray()
        self._transport = None
        protocol = self._factory()
        transport.set_protocol(protocol)
        protocol.connection_made(_Proxied(transport, header))
        if rest:
            _feed(protocol, rest)

    def _timed_out(self) -> None:
        self._reject("timeout", f"no whole PROXY header within {self._timeout_s:g}s")

    def _reject(self, reason: Reason, detail: str) -> None:
        self._cancel_timer()
        self._count(reason, detail)
        if self._transport is not None:
            self._transport.close()  # nothing is owed to a client that cannot be named
            self._transport = None

    def _count(self, reason: Reason, detail: str) -> None:
        PROXY_PROTOCOL_REJECTED.labels(reason=reason).inc()
        log.warning(
            "closing client connection",
            reason=f"PROXY protocol: {reason}",
            detail=detail,
            peer=self._peer,
            listener=self._listener,
        )

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def _feed(protocol: asyncio.BaseProtocol, data: bytes) -> None:
    """Give bytes read past the header to the protocol that now owns the connection."""
    if isinstance(protocol, asyncio.BufferedProtocol):  # asyncio's TLS layer is one
        view = memoryview(data)
        while view:
            buffer = memoryview(protocol.get_buffer(len(view)))
            size = min(len(buffer), len(view))
            buffer[:size] = view[:size]
            protocol.buffer_updated(size)
            view = view[size:]
    elif isinstance(protocol, asyncio.Protocol):
        protocol.data_received(data)


def _address(peer: Any) -> str | None:
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return None


def _within(peer: Any, networks: tuple[Network, ...]) -> bool:
    if not isinstance(peer, tuple):
        return False
    try:
        address = ipaddress.ip_address(peer[0])
    except ValueError:
        return False
    return any(address in network for network in networks)


class _Proxied(asyncio.Transport):
    """The connection's transport, naming the client the PROXY header names."""

    def __init__(self, transport: asyncio.Transport, header: ProxyHeader) -> None:
        super().__init__()
        self._transport = transport
        self._peer = transport.get_extra_info("peername")
        self._source = header.source
        self._destination = header.destination

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername" and self._source is not None:
            return self._source
        if name == "proxied_by":  # the load balancer, which sent the header
            return _address(self._peer)
        if name == "proxy_destination":  # the address the client dialled
            return self._destination
        return self._transport.get_extra_info(name, default)

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def close(self) -> None:
        self._transport.close()

    def abort(self) -> None:
        self._transport.abort()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._transport.write(data)

    def writelines(self, list_of_data: Any) -> None:
        self._transport.writelines(list_of_data)

    def write_eof(self) -> None:
        self._transport.write_eof()

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()
