"""Local ports for tests and benches: one that refuses connections, held for as long as it is
used so no other process can take it, and waiting until a listener accepts."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def refused_port() -> Iterator[int]:
    """A local port that refuses connections: bound but never listening, until the block ends."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


def wait_for_port(port: int, timeout: float = 20.0) -> None:
    """Wait until something accepts connections on 127.0.0.1:port."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
