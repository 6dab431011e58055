"""The operations listener: /metrics for Prometheus, /healthz and /readyz for probes.

A deliberately small HTTP/1.1 server (GET only, one request per connection): it must keep
answering while the proxy is busy, and must not pull a web framework into the proxy. /metrics
is rendered on a thread of its own, one scrape at a time: a large registry (or a worker
supervisor adding up files) never stalls the event loop that proxies traffic.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

log = structlog.get_logger("proxy.admin")

# Reasons the proxy is not ready to take traffic; empty when it is.
Readiness = Callable[[], list[str]]

_MAX_REQUEST_BYTES = 8192
_READ_TIMEOUT_S = 5.0


class AdminServer:
    """Serves /metrics, /healthz and /readyz on its own port."""

    def __init__(
        self, readiness: Readiness, registry: Callable[[], CollectorRegistry] = lambda: REGISTRY
    ) -> None:
        self._readiness = readiness
        self._registry = registry
        self._server: asyncio.Server | None = None
        # One thread: concurrent scrapes queue here, never take threads judging needs.
        self._render = ThreadPoolExecutor(max_workers=1, thread_name_prefix="metrics")

    async def start(self, host: str, port: int) -> None:
        """Bind the listener (an OSError if the port is taken)."""
        self._server = await asyncio.start_server(self._serve, host, port)
        log.info("admin listener", port=port, paths=["/metrics", "/healthz", "/readyz"])

    async def close(self) -> None:
        """Stop listening."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        self._render.shutdown(wait=False, cancel_futures=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(_READ_TIMEOUT_S):
                head = await reader.readuntil(b"\r\n\r\n")
            status, content_type, answer = self._answer(head)
            if callable(answer):  # rendered off the event loop
                body = await asyncio.get_running_loop().run_in_executor(self._render, answer)
            else:
                body = answer
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            status, content_type, body = "400 Bad Request", "text/plain", b"bad request\n"
        except ConnectionError:
            writer.close()
            return
        writer.write(
            f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()

    def _metrics(self) -> bytes:
        return generate_latest(self._registry())

    def _answer(self, head: bytes) -> tuple[str, str, bytes | Callable[[], bytes]]:
        """Status, content type, and the body or what renders it."""
        if len(head) > _MAX_REQUEST_BYTES:
            return "431 Request Header Fields Too Large", "text/plain", b"too large\n"
        method, _, rest = head.split(b"\r\n", 1)[0].decode("latin-1").partition(" ")
        path = rest.split(" ", 1)[0].split("?", 1)[0]
        if method != "GET":
            return "405 Method Not Allowed", "text/plain", b"GET only\n"
        if path == "/metrics":
            return "200 OK", CONTENT_TYPE_LATEST, self._metrics
        if path == "/healthz":
            return "200 OK", "text/plain", b"ok\n"
        if path == "/readyz":
            reasons = self._readiness()
            if reasons:
                text = "not ready:\n" + "".join(f"- {r}\n" for r in reasons)
                return "503 Service Unavailable", "text/plain", text.encode()
            return "200 OK", "text/plain", b"ready\n"
        return "404 Not Found", "text/plain", b"/metrics, /healthz or /readyz\n"
