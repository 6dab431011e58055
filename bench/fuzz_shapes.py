"""The fuzz bench's fixed hostile shapes (issue 31): many connections stalled in large frames,
and requests whose entry counts cost far more than their size.

Each shape goes to a proxy on its own connections while a canary on another connection sends
a Metadata request every 100 ms; reported per shape: whether the proxy answered or closed the
shape's connection, in how many seconds, the proxy's RSS growth, the canary's worst wait, and
whether the proxy is still up. Run by `python -m bench.fuzz --shapes`.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kafka_policy_proxy.codec.header import request_header

CREATE_TOPICS, DELETE_TOPICS = 19, 20
SHAPE_ID = 1


def uvarint(n: int) -> bytes:
    """Kafka's unsigned varint (compact lengths are length + 1)."""
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def compact_string(text: str) -> bytes:
    data = text.encode()
    return uvarint(len(data) + 1) + data


def frame(api_key: int, version: int, body: bytes) -> bytes:
    """A request frame with the shape's correlation id; the size prefix included."""
    data = request_header(api_key, version, SHAPE_ID, "fuzz-shape") + body
    return struct.pack(">i", len(data)) + data


def delete_empty_names(count: int) -> bytes:
    """DeleteTopics v5 naming `count` empty topic names (one byte each)."""
    body = uvarint(count + 1) + b"\x01" * count + struct.pack(">i", 30_000) + b"\x00"
    return frame(DELETE_TOPICS, 5, body)


def create_many(count: int) -> bytes:
    """CreateTopics v7 of `count` topics, 1 partition, RF 1, no configs."""
    topic = struct.pack(">ih", 1, 1) + b"\x01\x01\x00"  # partitions, RF, assignments, configs, tags
    topics = b"".join(compact_string(f"fuzz.shape-{i:06d}") + topic for i in range(count))
    body = uvarint(count + 1) + topics + struct.pack(">i", 30_000) + b"\x00\x00"
    return frame(CREATE_TOPICS, 7, body)


def delete_random_ids(count: int) -> bytes:
    """DeleteTopics v6 naming `count` random topic ids (no names)."""
    state = b"".join(b"\x00" + os.urandom(16) + b"\x00" for _ in range(count))  # null name, id
    body = uvarint(count + 1) + state + struct.pack(">i", 30_000) + b"\x00"
    return frame(DELETE_TOPICS, 6, body)


def partial_create(size: int, sent: int) -> bytes:
    """The first `sent` bytes of a CreateTopics v7 frame declaring `size` bytes."""
    header = request_header(CREATE_TOPICS, 7, SHAPE_ID, "fuzz-shape")
    return struct.pack(">i", size) + header + b"\x00" * (sent - 4 - len(header))


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class Canary:
    """A Metadata request every 100 ms on a connection of its own; keeps the worst wait."""

    def __init__(self, port: int, sentinel: bytes) -> None:
        self.port = port
        self.sentinel = sentinel
        self.worst_s = 0.0
        self.failures = 0
        self._stop = asyncio.Event()
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        reader = writer = None
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                if writer is None:
                    reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
                assert reader is not None
                writer.write(self.sentinel)
                async with asyncio.timeout(60):
                    size = struct.unpack(">i", await reader.readexactly(4))[0]
                    await reader.readexactly(size)
            except (OSError, TimeoutError, asyncio.IncompleteReadError):
                self.failures += 1
                writer = None
            self.worst_s = max(self.worst_s, time.monotonic() - started)
            await asyncio.sleep(0.1)
        if writer is not None:
            writer.close()

    async def stop(self) -> None:
        self._stop.set()
        await self._task


async def answered_or_closed(port: int, data: bytes, within_s: float) -> tuple[str, float]:
    """Send one request alone; how the proxy dealt with it, and after how long."""
    started = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        async with asyncio.timeout(within_s):
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            await reader.readexactly(size)
        outcome = "answered"
    except (asyncio.IncompleteReadError, ConnectionError):
        outcome = "closed"
    except TimeoutError:
        outcome = "hang"
    finally:
        writer.close()
    return outcome, round(time.monotonic() - started, 2)


async def many_stalled(port: int, n: int, size: int, within_s: float) -> tuple[str, float]:
    """N connections each send 90% of a `size`-byte CreateTopics and stall: all closed when?

    Blocking sockets, one thread each: what the proxy does not read waits in the kernel, not
    in this process (an asyncio writer would copy it into its buffer, N times over, and stall
    the canary's loop beside it)."""
    started = time.monotonic()
    data = memoryview(partial_create(size - 4, size * 9 // 10))

    def attacker() -> bool:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.settimeout(within_s)
            try:
                sock.sendall(data)
                while sock.recv(65536):  # the proxy sends nothing; it closes, or not
                    pass
            except (ConnectionError, BrokenPipeError):
                pass
            except TimeoutError:
                return False
        return True

    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(max_workers=n) as pool:  # all at once, not a few at a time
        closed = await asyncio.gather(*(loop.run_in_executor(pool, attacker) for _ in range(n)))
    outcome = "closed" if all(closed) else "hang"
    return outcome, round(time.monotonic() - started, 2)


async def run_shapes(
    port: int, pid: Callable[[], int], sentinel: bytes, args: Any
) -> list[dict[str, Any]]:
    """Every shape in turn, each beside the canary; one result line per shape."""
    shapes: list[tuple[str, Callable[[], Any]]] = [
        (
            f"{args.shape_connections} connections x 90% of a {args.shape_frame_mib} MiB create",
            lambda: many_stalled(
                port, args.shape_connections, args.shape_frame_mib << 20, args.shape_timeout
            ),
        ),
        (
            "DeleteTopics v5, 1,048,576 empty names",
            lambda: answered_or_closed(port, delete_empty_names(1 << 20), args.shape_timeout),
        ),
        (
            "CreateTopics v7, 100,000 topics",
            lambda: answered_or_closed(port, create_many(100_000), args.shape_timeout),
        ),
        (
            "DeleteTopics v6, 2,000 random ids",
            lambda: answered_or_closed(port, delete_random_ids(2_000), args.shape_timeout),
        ),
    ]
    results = []
    for name, run in shapes:
        before = rss_kib(pid())
        canary = Canary(port, sentinel)
        peak = before
        task = asyncio.ensure_future(run())
        while not task.done():
            peak = max(peak, rss_kib(pid()))
            await asyncio.sleep(0.05)
        outcome, seconds = task.result()
        await canary.stop()
        results.append(
            {
                "shape": name,
                "outcome": outcome,
                "seconds": seconds,
                "rss_growth_mib": round((peak - before) / 1024, 1),
                "canary_worst_s": round(canary.worst_s, 2),
                "canary_failures": canary.failures,
                "proxy_up": rss_kib(pid()) > 0,
            }
        )
    return results
