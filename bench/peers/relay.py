"""The Python floor: a uvloop byte relay with no framing, one port per broker.

Each listening port relays to one broker's RELAY listener, which advertises the relay's
ports (harness/local_kafka/ `relay_ports`), so clients reach every broker through it.
Run: python bench/peers/relay.py LISTEN_PORT:TARGET_PORT [...]
"""

from __future__ import annotations

import asyncio
import functools
import sys

import uvloop


class _Half(asyncio.Protocol):
    """One side of a relayed connection: what it reads, its peer writes."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Half | None = None
        self.pending: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.write(data)
        else:
            self.pending.append(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()


class _Client(_Half):
    def __init__(self, target: int) -> None:
        super().__init__()
        self._target = target
        self._connecting: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        transport.pause_reading()  # type: ignore[attr-defined]
        self._connecting = asyncio.ensure_future(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, upstream = await loop.create_connection(_Half, "127.0.0.1", self._target)
        except OSError:
            assert self.transport is not None
            self.transport.close()
            return
        upstream.peer, self.peer = self, upstream
        for data in self.pending:
            upstream.transport.write(data)  # type: ignore[union-attr]
        self.pending.clear()
        assert self.transport is not None
        self.transport.resume_reading()


async def _serve(pairs: list[tuple[int, int]]) -> None:
    loop = asyncio.get_running_loop()
    for listen, target in pairs:
        await loop.create_server(functools.partial(_Client, target), "127.0.0.1", listen)
    print("relay ready", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    """Relay each LISTEN:TARGET pair until killed."""
    pairs = [(int(a), int(b)) for a, b in (arg.split(":") for arg in sys.argv[1:])]
    uvloop.run(_serve(pairs))


if __name__ == "__main__":
    main()
