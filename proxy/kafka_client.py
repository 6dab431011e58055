"""A small Kafka client for the proxy's own requests (broker discovery, cluster state)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from typing import Any

from codec.header import request_header, response_header_size
from codec.registry import decode_exact, encode, response_class

CLIENT_ID = "kafka-policy-proxy"


class KafkaClient:
    """One connection to one broker; requests are sent one at a time, each within a deadline."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, deadline: float
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._deadline = deadline
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()

    @classmethod
    async def connect(cls, host: str, port: int, deadline: float) -> KafkaClient:
        """Open a connection to host:port; every later request gets `deadline` seconds."""
        async with asyncio.timeout(deadline):
            reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer, deadline)

    async def request(self, message: Any) -> Any:
        """Send one kio request message and return the decoded response."""
        key, version = int(message.__api_key__), int(message.__version__)
        async with self._lock, asyncio.timeout(self._deadline):
            correlation_id = next(self._ids)
            body = request_header(key, version, correlation_id, CLIENT_ID) + encode(message)
            self._writer.write(len(body).to_bytes(4, "big") + body)
            await self._writer.drain()
            size = int.from_bytes(await self._reader.readexactly(4))
            frame = await self._reader.readexactly(size)
        if int.from_bytes(frame[:4], "big", signed=True) != correlation_id:
            raise ConnectionError("response correlation id does not match the request")
        start = response_header_size(frame, key, version)
        return decode_exact(response_class(key, version), frame, start)

    async def close(self) -> None:
        """Close the connection."""
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()
