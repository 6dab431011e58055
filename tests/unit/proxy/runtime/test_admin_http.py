"""The admin listener's HTTP: probes, metrics, and what it does with anything else."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric

from kafka_policy_proxy.proxy import metrics
from kafka_policy_proxy.proxy.runtime.admin_http import AdminServer

assert metrics.DECISIONS  # registered in the default registry, which /metrics shows


async def ask(port: int, raw: bytes) -> tuple[str, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    answer = (await reader.read()).decode()
    writer.close()
    head, _, body = answer.partition("\r\n\r\n")
    return head.split("\r\n", 1)[0], body


async def serving(reasons: list[str]) -> tuple[AdminServer, int]:
    server = AdminServer(lambda: reasons)
    await server.start("127.0.0.1", 0)
    assert server._server is not None
    return server, server._server.sockets[0].getsockname()[1]


async def test_probes_and_metrics() -> None:
    reasons: list[str] = []
    server, port = await serving(reasons)
    try:
        assert await ask(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n") == (
            "HTTP/1.1 200 OK",
            "ok\n",
        )
        assert await ask(port, b"GET /readyz HTTP/1.1\r\n\r\n") == ("HTTP/1.1 200 OK", "ready\n")
        reasons += ["no policy", "shutting down"]
        status, body = await ask(port, b"GET /readyz?verbose HTTP/1.1\r\n\r\n")
        assert status == "HTTP/1.1 503 Service Unavailable"
        assert body == "not ready:\n- no policy\n- shutting down\n"
        status, body = await ask(port, b"GET /metrics HTTP/1.1\r\n\r\n")
        assert status == "HTTP/1.1 200 OK"
        assert "# TYPE kpp_decisions_total counter" in body
    finally:
        await server.close()


async def test_anything_else_gets_a_clear_status() -> None:
    server, port = await serving([])
    try:
        assert (await ask(port, b"GET /admin HTTP/1.1\r\n\r\n"))[0] == "HTTP/1.1 404 Not Found"
        assert (await ask(port, b"POST /readyz HTTP/1.1\r\n\r\n"))[0].endswith(
            "405 Method Not Allowed"
        )
        # Cut off before the end of the headers: answered, not left hanging.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /healthz HTTP/1.1\r\n")
        writer.write_eof()
        assert (await reader.read()).startswith(b"HTTP/1.1 400 Bad Request")
        writer.close()
    finally:
        await server.close()


class _Blocking:
    """A collector that holds every scrape until it is released, and says on which thread."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.threads: list[str] = []

    def collect(self) -> Iterator[Metric]:
        self.threads.append(threading.current_thread().name)
        assert self.release.wait(10)
        yield GaugeMetricFamily("kpp_slow", "rendered late", value=1)


async def test_a_slow_scrape_does_not_hold_the_event_loop() -> None:
    collector = _Blocking()
    registry = CollectorRegistry()
    registry.register(collector)
    server = AdminServer(lambda: [], registry=lambda: registry)
    await server.start("127.0.0.1", 0)
    assert server._server is not None
    port = server._server.sockets[0].getsockname()[1]
    try:
        scrape = asyncio.create_task(ask(port, b"GET /metrics HTTP/1.1\r\n\r\n"))
        # Rendered on the event loop, the scrape would block this probe until its timeout.
        probe = await asyncio.wait_for(ask(port, b"GET /healthz HTTP/1.1\r\n\r\n"), 5)
        assert probe == ("HTTP/1.1 200 OK", "ok\n")
        assert not scrape.done()
        collector.release.set()
        status, body = await asyncio.wait_for(scrape, 5)
        assert status == "HTTP/1.1 200 OK" and "kpp_slow 1.0" in body
        assert collector.threads and collector.threads[0].startswith("metrics")
    finally:
        collector.release.set()
        await server.close()
