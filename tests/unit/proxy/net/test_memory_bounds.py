"""Memory bounds of issue 31, against a scripted fake broker: reading stops before bytes are
buffered, per connection and across the process."""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import AsyncIterator

import pytest
from prometheus_client import REGISTRY

from kafka_policy_proxy.codec.header import request_header
from kafka_policy_proxy.proxy.filters.chain import FilterChain
from kafka_policy_proxy.proxy.net.connection import ClientConnection
from kafka_policy_proxy.proxy.net.memory_budget import MemoryBudget
from kafka_policy_proxy.proxy.runtime.server import ProxyServer
from tests.unit.proxy.net.test_connection import (
    FakeBroker,
    closed_by_proxy,
    connect,
    read_response,
    request,
    started_proxy,
)

MIB = 1 << 20
METADATA = 3  # a filter reads it whole (the address rewrite)
READ = 256 * 1024  # the most one socket read takes (uvloop; asyncio takes less)


@pytest.fixture
async def fake_broker() -> AsyncIterator[FakeBroker]:
    fake = FakeBroker()
    broker_server = await asyncio.start_server(fake.handle, sock=fake.socket)
    yield fake
    broker_server.close()


def partial_metadata(size: int, sent: int) -> bytes:
    """The first `sent` bytes of a Metadata request frame that declares `size` bytes."""
    header = request_header(METADATA, 12, 1, "t")
    return struct.pack(">i", size) + header + b"\x00" * (sent - 4 - len(header))


def buffered(server: ProxyServer) -> list[int]:
    """The request bytes each connection actually holds (not what it reserved)."""
    return [c._conversation.pending_bytes for c in server._connections if c._conversation]


def closes(reason: str) -> float:
    return REGISTRY.get_sample_value("kpp_memory_closed_connections_total", {"reason": reason}) or 0


async def test_partial_frames_stop_at_the_budget_plus_one_read_each(
    fake_broker: FakeBroker,
) -> None:
    # Each connection sends 90% of a 2 MiB judged frame; 10 of them would hold 18 MiB. Before
    # issue 31, uvloop read on although the proxy paused (its pause from connection_made was
    # undone), and each connection held its whole 1.8 MiB.
    server = await started_proxy(
        fake_broker, max_frame_bytes=2 * MIB, max_buffered_bytes=2 * MIB, stall_timeout_s=30
    )
    writers = []
    try:
        for _ in range(10):
            _reader, writer = await connect(server)
            writer.write(partial_metadata(2 * MIB - 4, 2 * MIB * 9 // 10))
            writers.append(writer)
        # Wait until every connection is either not being read or holds all it was sent.
        deadline = time.monotonic() + 10
        while True:
            conns = list(server._connections)
            settled = [
                c
                for c in conns
                if c._client is not None
                and c._conversation is not None
                and (
                    not c._client.is_reading() or c._conversation.pending_bytes == 2 * MIB * 9 // 10
                )
            ]
            if len(conns) == 10 and len(settled) == 10:
                break
            assert time.monotonic() < deadline, "connections still being read"
            await asyncio.sleep(0.05)
        assert sum(buffered(server)) <= 2 * MIB + 10 * READ, buffered(server)
        assert server.budget.paused >= 8  # the frames reserved their size: most did not fit
    finally:
        for writer in writers:
            writer.close()
        await server.shutdown()


async def test_a_judged_frame_over_the_limit_is_closed_at_its_header(
    fake_broker: FakeBroker,
) -> None:
    server = await started_proxy(
        fake_broker, max_frame_bytes=MIB, max_judged_request_bytes=64 * 1024
    )
    before = closes("judged_request_too_large")
    try:
        reader, writer = await connect(server)
        writer.write(partial_metadata(MIB - 4, 64))  # its size and header only
        assert await closed_by_proxy(reader)
        assert closes("judged_request_too_large") == before + 1
        # The limit is the judged APIs': an unjudged request that large still streams.
        reader, writer = await connect(server)
        writer.write(request(1, 12, 7, b"\x00" * (MIB - 100)))  # Fetch, no filter reads it
        assert (await read_response(reader))[0] == 7
    finally:
        await server.shutdown()


class FakeTransport:
    """What a ClientConnection reads of its client's transport."""

    def __init__(self) -> None:
        self.write_buffer = 0
        self.reading = True

    def get_write_buffer_size(self) -> int:
        return self.write_buffer

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


async def test_one_connection_stops_reading_at_its_own_cap() -> None:
    budget = MemoryBudget(limit=1 << 40, stall_timeout_s=30)  # the process has room to spare
    conn = ClientConnection(
        listener="bootstrap",
        target=list,
        chain=FilterChain([]),
        max_frame_bytes=MIB,
        connect_timeout=1,
        budget=budget,
        max_judged_bytes=MIB,
        max_buffered_bytes=2 * MIB,
        on_open=lambda _conn: None,
        on_close=lambda _conn: None,
    )
    client = FakeTransport()
    conn._client = client  # type: ignore[assignment]
    budget.join(conn)
    client.write_buffer = 2 * MIB  # responses the client does not read
    conn.recount()
    assert not client.reading
    assert REGISTRY.get_sample_value("kpp_memory_paused_connections", {"reason": "connection_cap"})
    client.write_buffer = 2 * MIB - 1
    conn.recount()
    assert client.reading
    assert budget.used == 2 * MIB - 1
