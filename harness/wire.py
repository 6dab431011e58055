"""A blocking raw Kafka wire client for tests and benches: send kio messages, read responses."""

from __future__ import annotations

import socket
import struct
from typing import Any

from harness.frames import read_frame
from kafka_policy_proxy.codec.header import request_header, response_header_size
from kafka_policy_proxy.codec.registry import decode_exact, encode, response_class


class WireClient:
    """One TCP connection speaking the Kafka protocol, one request at a time or pipelined."""

    def __init__(self, host: str, port: int, timeout: float = 15.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self._next_id = 1
        self.sent: list[tuple[int, int, int]] = []

    def send(self, message: Any, correlation_id: int | None = None) -> int:
        """Send a request without waiting; return its correlation id."""
        key, version = int(message.__api_key__), int(message.__version__)
        if correlation_id is None:
            correlation_id = self._next_id
        self._next_id = correlation_id + 1
        body = request_header(key, version, correlation_id, "wire-test") + encode(message)
        self.sock.sendall(struct.pack(">i", len(body)) + body)
        self.sent.append((correlation_id, key, version))
        return correlation_id

    def send_raw(self, data: bytes) -> None:
        """Send bytes as they are."""
        self.sock.sendall(data)

    def read_frame(self) -> bytes:
        """Read one size-prefixed frame (without the prefix)."""
        return read_frame(self.sock)

    def receive(self) -> tuple[int, Any]:
        """Read the next response; return (correlation id, decoded body) for the oldest request."""
        _sent_id, key, version = self.sent.pop(0)
        frame = self.read_frame()
        got = struct.unpack_from(">i", frame)[0]
        start = response_header_size(frame, key, version)
        if key == 18 and struct.unpack_from(">h", frame, start)[0] == 35:
            version = 0  # KIP-511: an unsupported ApiVersions request is answered in v0
        return got, decode_exact(response_class(key, version), frame, start)

    def request(self, message: Any) -> Any:
        """Send one request and return its decoded response."""
        self.send(message)
        _, response = self.receive()
        return response

    def is_closed(self, wait: float = 5.0) -> bool:
        """Whether the peer has closed the connection (reads EOF or a reset within `wait`)."""
        self.sock.settimeout(wait)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()
