"""Reading Kafka's size-prefixed frames from a blocking socket, for tests, benches and tools."""

from __future__ import annotations

import socket
import struct


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    """Exactly `size` bytes, or ConnectionError if the peer closes first."""
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError(f"closed by the peer after {len(data)} of {size} bytes")
        data += chunk
    return bytes(data)


def read_frame(sock: socket.socket) -> bytes:
    """One size-prefixed frame, without its prefix."""
    (size,) = struct.unpack(">i", recv_exactly(sock, 4))
    return recv_exactly(sock, size)
