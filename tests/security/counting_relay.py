"""A TCP relay in front of one broker that counts the requests passing through it: put between
the proxy's cluster-state reader and the cluster, it shows what the proxy asks of the cluster,
whatever the proxy's own metrics say."""

from __future__ import annotations

import socket
import struct
import threading
from collections import Counter
from typing import Any

from kafka_policy_proxy.codec.header import peek_request_header, request_body_offset
from kafka_policy_proxy.codec.registry import decode_exact, request_class

METADATA = 3


class CountingRelay:
    """Relays every connection to `upstream`; counts requests by API key and the topics (names
    or ids) each Metadata request names."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self._upstream = upstream
        self._server = socket.create_server(("127.0.0.1", 0))
        self.address = self._server.getsockname()[:2]
        self.requests: Counter[int] = Counter()
        self.metadata_topics = 0
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def counts(self) -> tuple[int, int]:
        """(Metadata requests, topics they named) so far."""
        with self._lock:
            return self.requests[METADATA], self.metadata_topics

    def close(self) -> None:
        self._closed = True
        self._server.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            broker = socket.create_connection(self._upstream)
            threading.Thread(target=self._requests, args=(client, broker), daemon=True).start()
            threading.Thread(target=_copy, args=(broker, client), daemon=True).start()

    def _requests(self, client: socket.socket, broker: socket.socket) -> None:
        try:
            while True:
                size = _exactly(client, 4)
                frame = _exactly(client, struct.unpack(">i", size)[0])
                self._count(frame)
                broker.sendall(size + frame)
        except (OSError, EOFError):
            pass
        finally:
            client.close()
            broker.close()

    def _count(self, frame: bytes) -> None:
        header = peek_request_header(frame)
        named = 0
        if header.api_key == METADATA:
            request: Any = decode_exact(
                request_class(METADATA, header.api_version),
                frame,
                request_body_offset(frame, header),
            )
            named = len(request.topics) if request.topics is not None else 1
        with self._lock:
            self.requests[header.api_key] += 1
            self.metadata_topics += named


def _exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def _copy(source: socket.socket, target: socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            target.sendall(chunk)
    except OSError:
        pass
    finally:
        source.close()
        target.close()
