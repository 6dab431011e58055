"""`listeners.proxy_protocol: required`: the header is read before TLS and Kafka, the client it
names is the connection's client, and a connection without one is closed (both event loops)."""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import socket
import ssl
import struct
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from prometheus_client import REGISTRY

from kafka_policy_proxy.codec.proxy_header import V2_SIGNATURE
from kafka_policy_proxy.proxy.config import ProxyConfig, TlsConfig
from kafka_policy_proxy.proxy.net.proxy_protocol import proxy_protocol_listener
from kafka_policy_proxy.proxy.runtime.server import ProxyServer
from kafka_policy_proxy.proxy.tls.client_side import server_context, tls_listener
from tests.unit.proxy.net.test_connection import (
    SLOW_API,
    FakeBroker,
    closed_by_proxy,
    free_port,
    read_response,
    request,
)
from tests.unit.proxy.tls_certs import TlsCerts, tls_certs_fixture  # noqa: F401

V1 = b"PROXY TCP4 203.0.113.9 127.0.0.1 51234 9192\r\n"
Factory = Callable[[], asyncio.BaseProtocol]


def v2_inet(source: str, source_port: int) -> bytes:
    body = socket.inet_aton(source) + socket.inet_aton("127.0.0.1")
    body += struct.pack("!HH", source_port, 9192)
    return V2_SIGNATURE + b"\x21\x11" + struct.pack("!H", len(body)) + body


def rejected(reason: str) -> float:
    return REGISTRY.get_sample_value("kpp_proxy_protocol_rejected_total", {"reason": reason}) or 0


class Recording(asyncio.Protocol):
    """The listener's own protocol: what it was told of the client, and what it read."""

    def __init__(self) -> None:
        self.peer: Any = None
        self.via: Any = None
        self.data = bytearray()
        self.transport: Any = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.peer = transport.get_extra_info("peername")
        self.via = transport.get_extra_info("proxied_by")

    def data_received(self, data: bytes) -> None:
        self.data += data
        self.transport.write(b"echo:" + data)


async def serve(
    wrap: Callable[[Factory], Factory] = lambda f: f, **options: Any
) -> tuple[asyncio.Server, int, list[Recording]]:
    """A listener: the PROXY header reader, then `wrap` (TLS, say), then a Recording."""
    made: list[Recording] = []

    def inner() -> Recording:
        made.append(Recording())
        return made[-1]

    factory = proxy_protocol_listener(
        wrap(inner), listener="bootstrap", **{"timeout_s": 5.0, **options}
    )
    server = await asyncio.get_running_loop().create_server(factory, "127.0.0.1", 0)
    return server, int(server.sockets[0].getsockname()[1]), made


@pytest.mark.parametrize("header", [V1, v2_inet("203.0.113.9", 51234)], ids=["v1", "v2"])
async def test_the_header_names_the_client_and_the_rest_is_the_clients(header: bytes) -> None:
    server, port, made = await serve()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(header + b"first")  # one write: the client's bytes arrive with the header
    assert await reader.readexactly(10) == b"echo:first"
    writer.write(b"second")
    assert await reader.readexactly(11) == b"echo:second"
    [conn] = made
    assert conn.peer == ("203.0.113.9", 51234)
    local = writer.get_extra_info("sockname")
    assert conn.via == f"{local[0]}:{local[1]}"  # the balancer: here, this test's socket
    writer.close()
    server.close()


async def test_a_header_split_over_reads_is_waited_for() -> None:
    server, port, made = await serve()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    header = v2_inet("198.51.100.4", 7)
    for start in range(0, len(header), 5):
        writer.write(header[start : start + 5])
        await writer.drain()
        await asyncio.sleep(0)  # let each piece be read on its own
    writer.write(b"x")
    assert await reader.readexactly(6) == b"echo:x"
    assert made[0].peer == ("198.51.100.4", 7)
    writer.close()
    server.close()


@pytest.mark.parametrize(
    ("start", "reason"),
    [
        (struct.pack("!ihhi", 10, 18, 3, 1), "no_header"),  # a Kafka client, straight in
        (b"\x16\x03\x01\x02\x00", "no_header"),  # a TLS ClientHello, straight in
        (b"PROXY TCP4 999.0.0.1 127.0.0.1 1 2\r\n", "malformed"),
    ],
)
async def test_a_connection_without_a_valid_header_is_closed(start: bytes, reason: str) -> None:
    server, port, made = await serve()
    before = rejected(reason)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(start)
    assert await closed_by_proxy(reader)
    assert made == []  # the listener's protocol never saw it
    assert rejected(reason) == before + 1
    writer.close()
    server.close()


async def test_a_silent_connection_is_closed_at_the_timeout() -> None:
    server, port, made = await serve(timeout_s=0.2)
    before = rejected("timeout")
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"PROXY TCP4 ")  # and nothing more
    assert await closed_by_proxy(reader, within=5)
    assert rejected("timeout") == before + 1 and made == []
    writer.close()
    server.close()


async def test_a_peer_outside_the_allowed_balancers_is_closed_before_its_header() -> None:
    outside = [ipaddress.ip_network("10.9.0.0/16")]
    server, port, made = await serve(allowed_peers=outside)
    before = rejected("peer")
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(V1 + b"x")
    assert await closed_by_proxy(reader)
    assert rejected("peer") == before + 1 and made == []
    writer.close()
    server.close()
    inside = [ipaddress.ip_network("127.0.0.0/8")]
    server, port, made = await serve(allowed_peers=inside)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(V1 + b"x")
    assert await reader.readexactly(6) == b"echo:x"
    writer.close()
    server.close()


async def test_the_header_comes_before_the_tls_handshake(tls_certs: TlsCerts) -> None:
    context = server_context(
        TlsConfig(cert_file=tls_certs.server_cert, key_file=tls_certs.server_key)
    )
    server, port, made = await serve(lambda inner: tls_listener(inner, context))
    client = ssl.create_default_context(cafile=str(tls_certs.ca))
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(v2_inet("192.0.2.77", 4444))
    await writer.drain()
    await writer.start_tls(client, server_hostname="localhost")
    writer.write(b"over tls")
    assert await reader.readexactly(13) == b"echo:over tls"
    [conn] = made
    # Through the TLS layer, the client is still the header's.
    assert conn.peer == ("192.0.2.77", 4444)
    assert conn.transport.get_extra_info("ssl_object") is not None
    writer.close()
    server.close()


@pytest.fixture
async def fake_broker() -> AsyncIterator[FakeBroker]:
    fake = FakeBroker()
    broker_server = await asyncio.start_server(fake.handle, sock=fake.socket)
    yield fake
    broker_server.close()


async def started_proxy(fake: FakeBroker) -> ProxyServer:
    for _ in range(5):
        node_port = free_port()
        config = ProxyConfig(
            listeners={
                "bind_host": "127.0.0.1",
                "advertised_host": "127.0.0.1",
                "bootstrap_port": free_port(),
                "broker_port_base": node_port - 1,
                "proxy_protocol": "required",
            },
            upstream={"bootstrap_servers": [f"127.0.0.1:{fake.port}"]},
            shutdown_timeout_s=2,
        )
        server = ProxyServer(config)
        try:
            await server.start()
        except OSError as exc:
            await server.shutdown()
            if exc.errno != errno.EADDRINUSE:
                raise
            continue
        return server
    raise RuntimeError("no free ports for the proxy after 5 tries")


async def test_the_proxy_names_the_headers_client_on_every_listener(
    fake_broker: FakeBroker,
) -> None:
    server = await started_proxy(fake_broker)
    try:
        ports = [int(server.bootstrap_address.split(":")[1]), *server.node_ports.values()]
        for port in ports:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(V1 + request(SLOW_API, 5, 7))
            assert await read_response(reader) == (7, b"ok")
            [conn] = [c for c in server._connections if c._conversation is not None]
            assert conn._conversation is not None
            assert conn._conversation.client_address == "203.0.113.9:51234"
            writer.close()
            await writer.wait_closed()
            await asyncio.wait_for(conn.closed, 5)
            # Straight in, without the header: closed, and the broker never hears of it.
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            received = len(fake_broker.received)
            writer.write(request(SLOW_API, 5, 8))
            assert await closed_by_proxy(reader)
            assert len(fake_broker.received) == received
            writer.close()
    finally:
        await server.shutdown()
