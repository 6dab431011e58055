"""Spliced pass-through bodies (net.splice) over real loopback sockets: byte-exact, in request
order, with back-pressure, the memory budget, the byte counters and closes mid-body as on the
copying path."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import statistics
import struct
import time
from collections.abc import AsyncIterator, Callable

import pytest
from prometheus_client import REGISTRY

from kafka_policy_proxy.codec.header import peek_request_header, produce_acks, response_header
from kafka_policy_proxy.proxy.net import spliced_body
from kafka_policy_proxy.proxy.net.connection import ClientConnection, framed
from kafka_policy_proxy.proxy.net.frame_sized_reads import HEAD_BYTES, READ_BYTES, FrameSizedReads
from kafka_policy_proxy.proxy.runtime.server import ProxyServer
from tests.unit.proxy.net.test_connection import (
    connect,
    listening_socket,
    read_response,
    request,
    started_proxy,
)
from tests.unit.proxy.tls_certs import TlsCerts, tls_certs_fixture  # noqa: F401

pytestmark = pytest.mark.skipif(not spliced_body.available(), reason="no splice(2) here")

PRODUCE = 0  # answered "ok" (unless acks=0)
FETCH = 1  # answered with the body size the request asks for
LIST_OFFSETS = 2  # answered at once, small
METADATA = 3
MIB = 1 << 20


def body_of(size: int, seed: int) -> bytes:
    """A body whose bytes say where they are (a shifted byte would show)."""
    return (bytes(range(seed % 251, 251)) + bytes(range(seed % 251))) * (size // 251) + bytes(
        size % 251
    )


class BodyBroker:
    """Answers a Fetch with a body of the size its request asks for (4 bytes), whole; with a
    5th byte, it sends half of the response and closes."""

    def __init__(self) -> None:
        self.socket = listening_socket()
        self.port = int(self.socket.getsockname()[1])
        self.writers: list[asyncio.StreamWriter] = []
        self.requests: list[bytes] = []  # every request frame, after its size
        self.ended_mid_frame = 0  # connections closed inside a request frame

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                try:
                    frame = await reader.readexactly(size)
                except asyncio.IncompleteReadError:
                    self.ended_mid_frame += 1
                    raise
                header = peek_request_header(frame)
                if header.api_key != METADATA:  # the proxy's own, at start
                    self.requests.append(frame)
                reply = response_header(header.correlation_id, header.api_key, header.api_version)
                if header.api_key == PRODUCE and produce_acks(frame, header) == 0:
                    continue
                if header.api_key != FETCH:
                    writer.write(framed(reply, b"ok"))
                    continue
                half, wanted = frame[-5] == 0xEE, struct.unpack(">i", frame[-4:])[0]
                data = framed(reply, body_of(wanted, header.correlation_id))
                if half:
                    writer.write(data[: len(data) // 2])
                    await writer.drain()
                    writer.close()
                    return
                writer.write(data)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


def fetch(correlation_id: int, size: int, *, close_mid_body: bool = False) -> bytes:
    return request(
        FETCH,
        12,
        correlation_id,
        (b"\xee" if close_mid_body else b"\x00") + struct.pack(">i", size),
    )


@pytest.fixture
async def broker() -> AsyncIterator[BodyBroker]:
    fake = BodyBroker()
    server = await asyncio.start_server(fake.handle, sock=fake.socket)
    yield fake
    server.close()


async def proxy_for(broker: BodyBroker, splice: bool = True, **limits: object) -> ProxyServer:
    return await started_proxy(broker, net={"splice": splice}, **limits)  # type: ignore[arg-type]


def only(server: ProxyServer) -> ClientConnection:
    (conn,) = server._connections
    return conn


async def until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.01)


def to_client() -> float:
    return REGISTRY.get_sample_value("kpp_bytes_total", {"direction": "broker_to_client"}) or 0


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("size", [MIB, 9 * MIB + 7])
async def test_a_large_response_is_spliced_byte_exact(broker: BodyBroker, size: int) -> None:
    server = await proxy_for(broker, max_frame_bytes=MIB)
    before = to_client()
    try:
        reader, writer = await connect(server)
        writer.write(fetch(7, size))
        correlation_id, body = await read_response(reader)
        assert correlation_id == 7
        assert body[1:] == body_of(size, 7)  # after the tagged-fields byte of the v12 header
        assert only(server)._pipes, "the body was copied, not spliced"
        # Every byte is counted, the spliced ones included.
        assert to_client() - before == 4 + 4 + 1 + size
        await until(lambda: only(server).held == 0, "the budget was not given back")
        assert server.budget.used == 0
        writer.close()
    finally:
        await server.shutdown()


async def test_responses_stay_in_request_order_with_self_answers_between(
    broker: BodyBroker,
) -> None:
    server = await proxy_for(broker)
    try:
        reader, writer = await connect(server)
        too_new = framed(struct.pack(">hhih", 18, 99, 3, 1), b"t\x00\x00")  # answered by us
        writer.write(
            fetch(1, 3 * MIB)
            + request(LIST_OFFSETS, 5, 2)
            + too_new
            + fetch(4, 2 * MIB)
            + fetch(5, 100)
            + fetch(6, 5 * MIB)
        )
        got = [await read_response(reader) for _ in range(6)]
        assert [c for c, _ in got] == [1, 2, 3, 4, 5, 6]
        for correlation_id, size in ((1, 3 * MIB), (4, 2 * MIB), (5, 100), (6, 5 * MIB)):
            assert got[correlation_id - 1][1][1:] == body_of(size, correlation_id)
        writer.close()
    finally:
        await server.shutdown()


async def test_a_slow_reader_holds_the_broker_back_and_only_the_pipe_is_charged(
    broker: BodyBroker,
) -> None:
    server = await proxy_for(broker)
    try:
        reader, writer = await connect(server)
        transport = writer.transport
        transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        transport.pause_reading()  # a client that reads nothing for now
        writer.write(fetch(1, 64 * MIB))
        conn = await _connection(server)
        await until(lambda: conn._body is not None, "no splice started")
        await asyncio.sleep(0.5)
        body = conn._body
        assert body is not None
        assert body.left > 32 * MIB, "the proxy read on although the client did not"
        conn.recount()
        assert conn.held == body.in_pipe <= spliced_body.PIPE_BYTES
        assert server.budget.used == conn.held
        transport.resume_reading()
        correlation_id, got = await read_response(reader)
        assert correlation_id == 1 and got[1:] == body_of(64 * MIB, 1)
        await until(lambda: conn.held == 0 and server.budget.used == 0, "budget not given back")
        writer.close()
    finally:
        await server.shutdown()


async def test_the_memory_budget_stops_the_splice_reading(broker: BodyBroker) -> None:
    server = await proxy_for(broker)
    try:
        reader, writer = await connect(server)
        writer.transport.pause_reading()
        writer.write(fetch(1, 32 * MIB))
        conn = await _connection(server)
        await until(lambda: conn._body is not None, "no splice started")
        conn.pause("memory")
        await asyncio.sleep(0.2)
        body = conn._body
        assert body is not None
        left = body.left
        writer.transport.resume_reading()
        await asyncio.sleep(0.3)
        assert body.left == left, "read from the broker while memory was short"
        conn.resume("memory")
        correlation_id, got = await read_response(reader)
        assert correlation_id == 1 and got[1:] == body_of(32 * MIB, 1)
        writer.close()
    finally:
        await server.shutdown()


async def test_a_broker_closing_mid_body_closes_the_client_after_what_was_sent(
    broker: BodyBroker,
) -> None:
    server = await proxy_for(broker)
    try:
        reader, writer = await connect(server)
        writer.write(fetch(1, 8 * MIB, close_mid_body=True))
        got = await asyncio.wait_for(reader.read(), 10)  # all the proxy sends, to its close
        whole = framed(response_header(1, FETCH, 12), body_of(8 * MIB, 1))
        assert got == whole[: len(whole) // 2]
        await until(lambda: not server._connections, "the connection stayed open")
        writer.close()
    finally:
        await server.shutdown()


async def test_a_client_closing_mid_body_leaves_nothing_open(broker: BodyBroker) -> None:
    server = await proxy_for(broker)
    try:
        fds = open_fds()
        _reader, writer = await connect(server)
        writer.transport.pause_reading()
        writer.write(fetch(1, 64 * MIB))
        conn = await _connection(server)
        await until(lambda: conn._body is not None, "no splice started")
        writer.transport.abort()
        await until(lambda: not server._connections, "the connection stayed open")
        assert conn._body is None and [p.read_fd for p in conn._pipes] == [-1]
        # The broker side closed too (no descriptor copy kept it open).
        await until(lambda: all(w.is_closing() for w in broker.writers), "broker side open")
        await until(lambda: open_fds() <= fds, "descriptors leaked")
    finally:
        await server.shutdown()


async def test_other_connections_are_served_while_large_bodies_move(broker: BodyBroker) -> None:
    # 50 slow readers, each with a spliced body stuck at its pipe, beside a large body that
    # moves at full speed: a small request on another connection is answered at once.
    server = await proxy_for(broker)
    try:
        slow = [await connect(server) for _ in range(50)]
        await until(lambda: len(server._connections) == 50, "not connected")
        for conn in server._connections:  # small socket buffers: a few MiB stay to be moved
            assert conn._client is not None
            small_buffers(conn._client, socket.SO_SNDBUF)
        for n, (_r, w) in enumerate(slow):
            small_buffers(w.transport, socket.SO_RCVBUF)
            w.transport.pause_reading()
            w.write(fetch(n, 3 * MIB))
        await until(
            lambda: sum(c._body is not None for c in server._connections) == 50, "not spliced"
        )
        quick_reader, quick_writer = await connect(server)
        quick_writer.write(request(LIST_OFFSETS, 5, 0))  # its broker connection is made now
        await read_response(quick_reader)
        big_reader, big_writer = await connect(server)
        big_writer.write(fetch(1, 128 * MIB))
        await until(
            lambda: sum(c._body is not None for c in server._connections) == 51, "not spliced"
        )
        latencies = []
        for n in range(50):
            sent = time.monotonic()
            quick_writer.write(request(LIST_OFFSETS, 5, n))
            assert (await read_response(quick_reader))[0] == n
            latencies.append(time.monotonic() - sent)
        assert statistics.median(latencies) < 0.05, latencies
        correlation_id, body = await read_response(big_reader)
        assert correlation_id == 1 and len(body) == 128 * MIB + 1
        for _r, w in slow:
            w.close()
        big_writer.close()
        quick_writer.close()
    finally:
        await server.shutdown()


async def test_drain_finishes_the_spliced_body_then_closes(broker: BodyBroker) -> None:
    server = await proxy_for(broker)
    reader, writer = await connect(server)
    writer.transport.pause_reading()
    writer.write(fetch(1, 16 * MIB))
    conn = await _connection(server)
    await until(lambda: conn._body is not None, "no splice started")
    shutting = asyncio.ensure_future(server.shutdown())
    await asyncio.sleep(0.1)
    writer.transport.resume_reading()
    correlation_id, body = await read_response(reader)
    assert correlation_id == 1 and body[1:] == body_of(16 * MIB, 1)
    assert await asyncio.wait_for(reader.read(), 5) == b""
    await shutting


async def test_switched_off_the_body_is_copied(broker: BodyBroker) -> None:
    server = await proxy_for(broker, splice=False)
    try:
        reader, writer = await connect(server)
        writer.write(fetch(3, 2 * MIB))
        correlation_id, body = await read_response(reader)
        assert correlation_id == 3 and body[1:] == body_of(2 * MIB, 3)
        conn = only(server)
        assert not conn._pipes
        assert conn._client is not None and conn._client.get_protocol() is conn  # reads as ever
        writer.close()
    finally:
        await server.shutdown()


def small_buffers(transport: asyncio.BaseTransport, which: int) -> None:
    transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, which, 65536)


async def _connection(server: ProxyServer) -> ClientConnection:
    await until(lambda: len(server._connections) == 1, "no connection")
    return only(server)


def produce(correlation_id: int, size: int, acks: int = 1) -> bytes:
    """A Produce v9 whose records are `size` bytes the proxy never reads (nor does the fake)."""
    body = b"\x00" + struct.pack(">hi", acks, 1000) + body_of(size, correlation_id)
    return request(PRODUCE, 9, correlation_id, body)


def to_broker() -> float:
    return REGISTRY.get_sample_value("kpp_bytes_total", {"direction": "client_to_broker"}) or 0


async def test_a_large_produce_is_spliced_byte_exact(broker: BodyBroker) -> None:
    server = await proxy_for(broker, max_frame_bytes=64 * MIB)
    before = to_broker()
    try:
        reader, writer = await connect(server)
        frames = [produce(1, 9 * MIB + 3), produce(2, 100), produce(3, 2 * MIB, acks=0)]
        writer.write(b"".join(frames) + request(LIST_OFFSETS, 5, 4))
        assert [(await read_response(reader))[0] for _ in range(3)] == [1, 2, 4]  # acks=0: none
        await until(lambda: len(broker.requests) == 4, "requests missing at the broker")
        assert broker.requests[:3] == [f[4:] for f in frames]
        assert any(p.read_fd >= 0 for p in only(server)._pipes), "copied, not spliced"
        assert to_broker() - before == sum(map(len, frames)) + len(request(LIST_OFFSETS, 5, 4))
        await until(lambda: only(server).held == 0 and server.budget.used == 0, "budget held")
        writer.close()
    finally:
        await server.shutdown()


async def test_produce_and_fetch_bodies_move_at_once(broker: BodyBroker) -> None:
    server = await proxy_for(broker, max_frame_bytes=64 * MIB)
    try:
        reader, writer = await connect(server)
        writer.write(fetch(1, 16 * MIB) + produce(2, 16 * MIB) + fetch(3, 8 * MIB))
        got = [await read_response(reader) for _ in range(3)]
        assert [c for c, _ in got] == [1, 2, 3]
        assert got[0][1][1:] == body_of(16 * MIB, 1) and got[2][1][1:] == body_of(8 * MIB, 3)
        assert broker.requests[1] == produce(2, 16 * MIB)[4:]
        writer.close()
    finally:
        await server.shutdown()


async def test_a_client_closing_mid_produce_closes_the_broker_side(broker: BodyBroker) -> None:
    server = await proxy_for(broker, max_frame_bytes=64 * MIB)
    try:
        fds = open_fds()
        _reader, writer = await connect(server)
        frame = produce(1, 32 * MIB)
        writer.write(frame[: len(frame) // 2])
        conn = await _connection(server)
        await until(lambda: conn._request_body is not None, "no splice started")
        await writer.drain()
        writer.transport.abort()
        await until(lambda: not server._connections, "the connection stayed open")
        await until(lambda: broker.ended_mid_frame == 1, "the broker side stayed open")
        assert broker.requests == []
        await until(lambda: open_fds() <= fds, "descriptors leaked")
    finally:
        await server.shutdown()


async def test_drain_finishes_a_spliced_produce_then_closes(
    broker: BodyBroker,
) -> None:
    server = await proxy_for(broker, max_frame_bytes=64 * MIB)
    reader, writer = await connect(server)
    frame = produce(1, 32 * MIB)
    writer.write(frame[: len(frame) // 2])
    conn = await _connection(server)
    await until(lambda: conn._request_body is not None, "no splice started")
    shutting = asyncio.ensure_future(server.shutdown())
    await asyncio.sleep(0.1)
    writer.write(frame[len(frame) // 2 :])
    assert (await read_response(reader))[0] == 1
    assert await asyncio.wait_for(reader.read(), 5) == b""
    assert broker.requests == [frame[4:]]
    await shutting


async def test_a_tls_listener_keeps_the_copying_path(
    broker: BodyBroker, tls_certs: TlsCerts
) -> None:
    # TLS bytes must pass through OpenSSL: net.splice does not apply to a TLS listener.
    tls = {"cert_file": str(tls_certs.server_cert), "key_file": str(tls_certs.server_key)}
    server = await started_proxy(broker, net={"splice": True}, tls=tls)  # type: ignore[arg-type]
    try:
        host, port = server.bootstrap_address.split(":")
        client = ssl.create_default_context(cafile=str(tls_certs.ca))
        reader, writer = await asyncio.open_connection(
            host, int(port), ssl=client, server_hostname="localhost"
        )
        writer.write(fetch(1, 4 * MIB))
        correlation_id, body = await read_response(reader)
        assert correlation_id == 1 and body[1:] == body_of(4 * MIB, 1)
        conn = only(server)
        assert not conn._splice and not conn._pipes
        assert conn._upstream is not None
        assert not isinstance(conn._upstream.get_protocol(), FrameSizedReads)
        writer.close()
    finally:
        await server.shutdown()


async def test_a_body_read_whole_waits_for_its_client_without_spinning(
    broker: BodyBroker,
) -> None:
    # The body is all in the pipe and the client reads nothing; the next response is already
    # at the broker socket: the proxy must not keep waking up for it.
    server = await proxy_for(broker)
    try:
        reader, writer = await connect(server)
        conn = await _connection(server)
        assert conn._client is not None
        small_buffers(conn._client, socket.SO_SNDBUF)
        small_buffers(writer.transport, socket.SO_RCVBUF)
        writer.transport.pause_reading()
        writer.write(fetch(1, 1200 * 1024) + fetch(2, 10))
        await until(lambda: conn._body is not None and conn._body.left == 0, "not read whole")
        await asyncio.sleep(0.2)
        cpu = time.process_time()
        await asyncio.sleep(1)
        assert time.process_time() - cpu < 0.3, "the loop spun while the client read nothing"
        writer.transport.resume_reading()
        assert (await read_response(reader))[0] == 1
        assert await read_response(reader) == (2, b"\x00" + body_of(10, 2))
        writer.close()
    finally:
        await server.shutdown()


def spliced(direction: str) -> float:
    return REGISTRY.get_sample_value("kpp_spliced_bytes_total", {"direction": direction}) or 0


@pytest.mark.parametrize("direction", ["broker_to_client", "client_to_broker"])
async def test_all_but_the_head_of_a_kafka_sized_body_is_spliced(
    broker: BodyBroker, direction: str
) -> None:
    # Reads sized to frame boundaries: the first read of a frame takes its head only, so the
    # rest of a Fetch response or a Produce of 1 MiB (a consumer's default most per partition)
    # is still in the socket to be spliced.
    server = await proxy_for(broker, max_frame_bytes=2 * MIB)
    try:
        reader, writer = await connect(server)
        before = spliced(direction)
        if direction == "broker_to_client":
            size, frame = MIB, fetch(1, MIB)
        else:
            size, frame = MIB, produce(1, MIB)
        writer.write(request(LIST_OFFSETS, 5, 0) + frame + request(LIST_OFFSETS, 5, 2))
        assert [(await read_response(reader))[0] for _ in range(3)] == [0, 1, 2]
        moved = spliced(direction) - before
        assert size - HEAD_BYTES <= moved <= size, moved
        if direction == "client_to_broker":
            await until(lambda: len(broker.requests) == 3, "requests missing at the broker")
            assert broker.requests[1] == frame[4:]
        writer.close()
    finally:
        await server.shutdown()


async def test_a_proxy_protocol_header_is_read_before_the_sized_reads(
    broker: BodyBroker,
) -> None:
    # The bytes read past a PROXY header go to the sized reads as any read would.
    server = await started_proxy(
        broker,
        net={"splice": True},
        listeners={"proxy_protocol": "required"},
        max_frame_bytes=2 * MIB,
    )
    try:
        reader, writer = await connect(server)
        header = b"PROXY TCP4 203.0.113.9 127.0.0.1 51234 9192\r\n"
        frame = produce(1, 512 * 1024)
        writer.write(header + frame + fetch(2, 2 * MIB))
        assert (await read_response(reader))[0] == 1
        assert await read_response(reader) == (2, b"\x00" + body_of(2 * MIB, 2))
        await until(lambda: len(broker.requests) == 2, "requests missing at the broker")
        assert broker.requests[0] == frame[4:]
        assert only(server)._conversation is not None
        assert only(server)._conversation.client_address == "203.0.113.9:51234"
        writer.close()
    finally:
        await server.shutdown()


def test_reads_stop_at_frame_boundaries_while_the_frames_are_large() -> None:
    class Heard:
        def __init__(self) -> None:
            self.data: list[bytes] = []

        def data_received(self, data: bytes) -> None:
            self.data.append(data)

    rest = [0]
    heard = Heard()
    reads = FrameSizedReads(heard, lambda: rest[0], 64 * 1024)  # type: ignore[arg-type]

    def read(size: int, rest_after: int) -> None:
        buffer = reads.get_buffer(-1)
        buffer[:size] = bytes([len(heard.data)]) * size
        rest[0] = rest_after  # what the protocol made of it
        reads.buffer_updated(size)

    assert len(reads.get_buffer(-1)) == HEAD_BYTES  # at a boundary: a head
    read(HEAD_BYTES, MIB)  # a large frame started: the rest of it, and a head of the next
    assert len(reads.get_buffer(-1)) == READ_BYTES
    rest[0] = 100
    assert len(reads.get_buffer(-1)) == 100 + HEAD_BYTES
    read(100 + HEAD_BYTES, 10_000)  # the next one is small: whole reads from now on
    assert len(reads.get_buffer(-1)) == READ_BYTES
    read(READ_BYTES, 0)
    assert len(reads.get_buffer(-1)) == READ_BYTES
    read(READ_BYTES, 5 * MIB)  # a large one again: boundaries again
    rest[0] = 0
    assert len(reads.get_buffer(-1)) == HEAD_BYTES
    assert heard.data == [bytes([n]) * len(d) for n, d in enumerate(heard.data)]  # copies
