"""The proxy's connection handling against a scripted fake broker (one component, no Kafka)."""

from __future__ import annotations

import asyncio
import errno
import socket
import struct
from collections.abc import AsyncIterator

import pytest

from harness.messages import build, single_broker_metadata
from kafka_policy_proxy.codec.header import (
    peek_request_header,
    produce_acks,
    request_header,
    response_header,
)
from kafka_policy_proxy.codec.registry import encode, request_class
from kafka_policy_proxy.proxy.config import ProxyConfig
from kafka_policy_proxy.proxy.net.connection import framed
from kafka_policy_proxy.proxy.runtime.server import ProxyServer

SLOW_API = 2  # ListOffsets: the fake broker answers it late
BIG_API = 1  # Fetch: the fake broker answers with a large body, in small slow pieces
BIG_BODY = bytes(range(256)) * 4096  # 1 MiB


def free_port() -> int:
    """A port free now; someone may take it before it is bound again (see `started_proxy`)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listening_socket() -> socket.socket:
    """A socket bound to a free port and kept: nobody can take the port in between."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


class FakeBroker:
    """Answers Metadata properly, ListOffsets after a delay, anything else at once."""

    def __init__(self) -> None:
        self.socket = listening_socket()
        self.port = int(self.socket.getsockname()[1])
        self.received: list[tuple[int, int]] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                header = peek_request_header(frame)
                self.received.append((header.api_key, header.correlation_id))
                if header.api_key == 0 and produce_acks(frame, header) == 0:
                    continue
                if header.api_key == SLOW_API:
                    await asyncio.sleep(0.3)
                body = (
                    single_broker_metadata(header.api_version, self.port)
                    if header.api_key == 3
                    else b"ok"
                )
                reply = response_header(header.correlation_id, header.api_key, header.api_version)
                if header.api_key == BIG_API:
                    data = framed(reply, BIG_BODY)
                    for start in range(0, len(data), 100_000):
                        writer.write(data[start : start + 100_000])
                        await writer.drain()
                        await asyncio.sleep(0.01)
                    continue
                writer.write(framed(reply, body))
        except asyncio.IncompleteReadError:
            writer.close()


async def started_proxy(
    fake: FakeBroker,
    net: dict[str, object] | None = None,
    tls: dict[str, object] | None = None,
    listeners: dict[str, object] | None = None,
    **limits: object,
) -> ProxyServer:
    """A proxy in front of the fake broker, on free ports (tried again if one was taken)."""
    for _ in range(5):
        node_port = free_port()
        config = ProxyConfig(
            listeners={
                "bind_host": "127.0.0.1",
                "advertised_host": "127.0.0.1",
                "bootstrap_port": free_port(),
                "broker_port_base": node_port - 1,
                **({"tls": tls} if tls else {}),
                **(listeners or {}),
            },
            upstream={"bootstrap_servers": [f"127.0.0.1:{fake.port}"]},
            limits={"max_frame_bytes": 4096, **limits},
            net=net or {},
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


@pytest.fixture
async def proxy() -> AsyncIterator[tuple[ProxyServer, FakeBroker]]:
    fake = FakeBroker()
    broker_server = await asyncio.start_server(fake.handle, sock=fake.socket)
    server = await started_proxy(fake)
    yield server, fake
    await server.shutdown()
    broker_server.close()


def request(api_key: int, version: int, correlation_id: int, body: bytes = b"") -> bytes:
    return framed(request_header(api_key, version, correlation_id, "t"), body)


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    frame = await reader.readexactly(size)
    return struct.unpack_from(">i", frame)[0], frame[4:]


async def connect(server: ProxyServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = server.bootstrap_address.split(":")
    return await asyncio.open_connection(host, int(port))


async def test_node_listener_bound_at_start(proxy: tuple[ProxyServer, FakeBroker]) -> None:
    server, _fake = proxy
    assert list(server.node_ports) == [1]


async def test_proxy_reply_waits_behind_a_slow_broker_response(
    proxy: tuple[ProxyServer, FakeBroker],
) -> None:
    server, _fake = proxy
    reader, writer = await connect(server)
    # A slow pass-through request, then an ApiVersions version the proxy answers itself.
    too_new = framed(struct.pack(">hhih", 18, 99, 2, 1), b"t\x00\x00")
    writer.write(request(SLOW_API, 5, 1) + too_new + request(SLOW_API, 5, 3))
    ids = [(await read_response(reader))[0] for _ in range(3)]
    assert ids == [1, 2, 3]
    writer.close()


async def test_acks_zero_produce_expects_no_response(
    proxy: tuple[ProxyServer, FakeBroker],
) -> None:
    server, fake = proxy
    reader, writer = await connect(server)
    produce = build(request_class(0, 9), transactional_id=None, acks=0, timeout=100, topic_data=())
    frames = b"".join(request(0, 9, i, encode(produce)) for i in range(1, 101))
    writer.write(frames + request(SLOW_API, 5, 500))
    correlation_id, body = await read_response(reader)
    assert (correlation_id, body) == (500, b"ok")
    assert sum(1 for key, _ in fake.received if key == 0) == 100
    writer.close()


@pytest.mark.parametrize(
    "garbage",
    [struct.pack(">i", 4097) + b"x" * 10, struct.pack(">i", -5), b"\xff" * 64, framed(b"\x00\x03")],
    ids=["oversize", "negative", "random", "short-header"],
)
async def test_malformed_input_closes_only_that_connection(
    proxy: tuple[ProxyServer, FakeBroker], garbage: bytes
) -> None:
    server, _fake = proxy
    good_reader, good_writer = await connect(server)
    bad_reader, bad_writer = await connect(server)
    bad_writer.write(garbage)
    assert await asyncio.wait_for(bad_reader.read(), 5) == b""
    good_writer.write(request(SLOW_API, 5, 9))
    assert await read_response(good_reader) == (9, b"ok")
    good_writer.close()


async def test_unsupported_version_closes_the_connection(
    proxy: tuple[ProxyServer, FakeBroker],
) -> None:
    server, fake = proxy
    reader, writer = await connect(server)
    writer.write(request(0, 12, 1))  # Produce v12 is above the proxy's cap
    assert await asyncio.wait_for(reader.read(), 5) == b""
    assert (0, 1) not in fake.received


async def test_shutdown_lets_responses_in_flight_finish(
    proxy: tuple[ProxyServer, FakeBroker],
) -> None:
    server, _fake = proxy
    reader, writer = await connect(server)
    writer.write(request(SLOW_API, 5, 77))
    await asyncio.sleep(0.05)
    await server.shutdown()
    assert await read_response(reader) == (77, b"ok")
    assert await asyncio.wait_for(reader.read(), 5) == b""


async def test_streamed_response_is_not_interleaved_with_a_proxy_reply(
    proxy: tuple[ProxyServer, FakeBroker],
) -> None:
    server, _fake = proxy
    reader, writer = await connect(server)
    too_new = framed(struct.pack(">hhih", 18, 99, 2, 1), b"t\x00\x00")
    writer.write(
        request(BIG_API, 12, 1) + too_new + request(BIG_API, 12, 3) + request(SLOW_API, 5, 4)
    )
    first = await read_response(reader)
    second = await read_response(reader)
    third = await read_response(reader)
    fourth = await read_response(reader)
    assert first == (1, b"\x00" + BIG_BODY)  # Fetch v12 is flexible: one empty tag byte
    assert second[0] == 2 and struct.unpack_from(">h", second[1])[0] == 35
    assert third == (3, b"\x00" + BIG_BODY)
    assert fourth == (4, b"ok")


async def test_shutdown_waits_for_a_response_being_streamed(
    proxy: tuple[ProxyServer, FakeBroker],
) -> None:
    server, _fake = proxy
    reader, writer = await connect(server)
    writer.write(request(BIG_API, 12, 5))
    await reader.readexactly(8)  # the stream has started
    await server.shutdown()
    assert await reader.read() == b"\x00" + BIG_BODY


@pytest.fixture
async def fake_broker() -> AsyncIterator[FakeBroker]:
    fake = FakeBroker()
    broker_server = await asyncio.start_server(fake.handle, sock=fake.socket)
    yield fake
    broker_server.close()


async def closed_by_proxy(reader: asyncio.StreamReader, within: float = 5) -> bool:
    """Whether the proxy closes this connection within `within` seconds (reading past data)."""
    try:
        async with asyncio.timeout(within):
            while await reader.read(65536):
                pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


async def test_a_connection_over_the_listener_cap_is_closed_at_once(
    fake_broker: FakeBroker,
) -> None:
    server = await started_proxy(fake_broker, max_connections_per_listener=2)
    try:
        admitted = [await connect(server) for _ in range(2)]
        over_reader, _over_writer = await connect(server)
        assert await closed_by_proxy(over_reader)
        for i, (reader, writer) in enumerate(admitted):
            writer.write(request(SLOW_API, 5, i))
            assert await read_response(reader) == (i, b"ok")
        # A place freed is a place taken again.
        admitted[0][1].close()
        deadline = asyncio.get_running_loop().time() + 5
        while True:
            reader, writer = await connect(server)
            writer.write(request(SLOW_API, 5, 7))
            try:
                assert await asyncio.wait_for(read_response(reader), 2) == (7, b"ok")
                break
            except asyncio.IncompleteReadError:
                assert asyncio.get_running_loop().time() < deadline
    finally:
        await server.shutdown()


async def test_the_process_wide_cap_counts_every_listener(fake_broker: FakeBroker) -> None:
    server = await started_proxy(fake_broker, max_connections=1)
    try:
        reader, writer = await connect(server)
        writer.write(request(SLOW_API, 5, 1))
        assert await read_response(reader) == (1, b"ok")  # admitted
        node_reader, _node_writer = await asyncio.open_connection("127.0.0.1", server.node_ports[1])
        assert await closed_by_proxy(node_reader)
        writer.write(request(SLOW_API, 5, 2))
        assert await read_response(reader) == (2, b"ok")
    finally:
        await server.shutdown()


async def test_over_the_memory_budget_stalled_connections_are_closed(
    fake_broker: FakeBroker,
) -> None:
    server = await started_proxy(fake_broker, max_buffered_bytes=8192, stall_timeout_s=0.3)
    try:
        stalled = []
        for _ in range(4):
            reader, writer = await connect(server)
            writer.write(struct.pack(">i", 4000) + b"x" * 3900)  # most of a frame, then nothing
            stalled.append((reader, writer))  # a writer collected would close its socket
        good_reader, good_writer = await connect(server)
        good_writer.write(request(SLOW_API, 5, 1))
        assert await read_response(good_reader) == (1, b"ok")
        for reader, _writer in stalled:
            assert await closed_by_proxy(reader)
        assert server.budget.used < server.budget.limit
        good_writer.write(request(SLOW_API, 5, 2))
        assert await read_response(good_reader) == (2, b"ok")
    finally:
        await server.shutdown()


async def test_under_the_memory_budget_a_slow_frame_is_left_alone(
    fake_broker: FakeBroker,
) -> None:
    server = await started_proxy(fake_broker, max_buffered_bytes=8192, stall_timeout_s=0.2)
    try:
        reader, writer = await connect(server)
        frame = request(SLOW_API, 5, 3)
        writer.write(frame[:5])
        assert not await closed_by_proxy(reader, within=0.6)  # three stall timeouts
        assert server.budget.used == 5
        writer.write(frame[5:])
        assert await read_response(reader) == (3, b"ok")
    finally:
        await server.shutdown()
