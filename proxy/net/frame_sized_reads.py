"""Reads sized to Kafka frame boundaries, for a connection whose bodies move by splice.

A plain `asyncio.Protocol` is handed whatever one read took: up to 256 KiB (uvloop's and
asyncio's read size), taken before anything has seen the header of the frame it starts. By the
time the conversation learns that a frame is a large pass-through body (proxy/net/
spliced_body.py), most of a Kafka-sized one (a Produce of up to 256 KiB a broker, a Fetch
response of up to 1 MiB) has already been copied into Python, and little is left to splice.

`FrameSizedReads` is an `asyncio.BufferedProtocol` in front of the connection's protocol: while
the frames are large, each read takes at most the rest of the current frame (as the
conversation counts it) and a small head of the next (enough for a Produce's header and acks,
or a response's size and correlation id), and never more than READ_BYTES. The rest of a large
frame is still in the socket once its header has been read, and is spliced from there.

Reads that small would cost a syscall or two per frame where a stream of small frames (16 KiB
Produce requests, pipelined) took dozens in one read: so the frame that started last in a read
decides. If it is large (`large` bytes or more still to come), the next frames are expected to
be too, and reads stop at frame boundaries; if it is small, reads take READ_BYTES as a plain
Protocol's do, until a large frame shows up again (its first READ_BYTES are then copied).

Every read goes into one buffer a thread shares (a read and the hand-over of its bytes happen
in one loop callback), and is copied out as `bytes` before the protocol sees it, as uvloop
does for a plain Protocol: the protocol's code is the same either way.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Protocol

# The most one read takes: the size uvloop and asyncio read with for a plain Protocol.
READ_BYTES = 256 * 1024
# How much of the next frame a read may take beyond the end of the current one.
HEAD_BYTES = 8 * 1024

_local = threading.local()


class Reader(Protocol):
    """The protocol behind the sized reads (a connection's client or broker side)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None: ...
    def data_received(self, data: bytes) -> None: ...
    def eof_received(self) -> bool | None: ...
    def connection_lost(self, exc: Exception | None) -> None: ...
    def pause_writing(self) -> None: ...
    def resume_writing(self) -> None: ...


class FrameSizedReads(asyncio.BufferedProtocol):
    """Hands `protocol` reads no longer than `rest()` (bytes to the end of the current frame,
    0 at a boundary) plus HEAD_BYTES while the frames are `large`."""

    def __init__(self, protocol: Reader, rest: Callable[[], int], large: int) -> None:
        self._protocol = protocol
        self._rest = rest
        self._large = large
        self._sized = True  # the frame that started last was large: stop at boundaries
        self._rest_before = 0  # of the frame the read started in
        self._buffer = _shared_buffer()

    def get_buffer(self, sizehint: int) -> memoryview:
        self._rest_before = rest = self._rest()
        if not self._sized:
            return self._buffer
        return self._buffer[: min(rest + HEAD_BYTES, READ_BYTES)]

    def buffer_updated(self, nbytes: int) -> None:
        self._protocol.data_received(self._buffer[:nbytes].tobytes())
        if nbytes > self._rest_before:  # a frame started in this read: is it large?
            self._sized = self._rest() >= self._large

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._protocol.connection_made(transport)

    def eof_received(self) -> bool | None:
        return self._protocol.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._protocol.connection_lost(exc)

    def pause_writing(self) -> None:
        self._protocol.pause_writing()

    def resume_writing(self) -> None:
        self._protocol.resume_writing()


def _shared_buffer() -> memoryview:
    """This thread's read buffer (every connection's reads go through it, one at a time)."""
    buffer: memoryview | None = getattr(_local, "buffer", None)
    if buffer is None:
        buffer = _local.buffer = memoryview(bytearray(READ_BYTES))
    return buffer
