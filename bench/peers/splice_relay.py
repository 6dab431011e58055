"""The kernel floor: a byte relay moving every byte with splice(2), one port per broker.

Like bench/peers/relay.py (which it stands beside in `bench.throughput --floor`), but each
direction of a connection moves socket -> pipe -> socket with `os.splice`, driven by uvloop's
reader and writer callbacks: no byte enters Python. No framing, no ordering, nothing checked:
what a proxy that splices every body could at best cost.
Run: python bench/peers/splice_relay.py LISTEN_PORT:TARGET_PORT [...]
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import socket
import sys

import uvloop

FLAGS = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK
PIPE_BYTES = 1 << 20


class _Direction:
    """One direction of a relayed connection: `source` to `destination` through a pipe."""

    def __init__(self, source: socket.socket, destination: socket.socket, on_end: object) -> None:
        self.loop = asyncio.get_running_loop()
        self.source, self.destination = source.fileno(), destination.fileno()
        self.read_fd, self.write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            self.capacity = fcntl.fcntl(self.write_fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        except OSError:
            self.capacity = fcntl.fcntl(self.write_fd, fcntl.F_GETPIPE_SZ)
        self.in_pipe = 0
        self.on_end = on_end
        self.reading = self.writing = False
        self.ended = False
        self._watch(True, False)

    def step(self) -> None:
        read = write = False
        while True:
            progress = 0
            if self.in_pipe:
                try:
                    n = os.splice(self.read_fd, self.destination, self.in_pipe, flags=FLAGS)
                except BlockingIOError:
                    write = True
                except OSError:
                    self.end()
                    return
                else:
                    self.in_pipe -= n
                    progress += n
                    write = False
            if self.in_pipe < self.capacity:
                try:
                    n = os.splice(
                        self.source, self.write_fd, self.capacity - self.in_pipe, flags=FLAGS
                    )
                except BlockingIOError:
                    read = True
                except OSError:
                    self.end()
                    return
                else:
                    if n == 0:
                        self.end()
                        return
                    self.in_pipe += n
                    progress += n
                    read = False
            if not progress:
                break
        self._watch(read and self.in_pipe < self.capacity, write)

    def _watch(self, read: bool, write: bool) -> None:
        if read != self.reading:
            self.reading = read
            if read:
                self.loop.add_reader(self.source, self.step)
            else:
                self.loop.remove_reader(self.source)
        if write != self.writing:
            self.writing = write
            if write:
                self.loop.add_writer(self.destination, self.step)
            else:
                self.loop.remove_writer(self.destination)

    def end(self) -> None:
        if not self.ended:
            self.ended = True
            self._watch(False, False)
            os.close(self.read_fd)
            os.close(self.write_fd)
            self.on_end()  # type: ignore[operator]


async def _relay(client: socket.socket, target: int) -> None:
    loop = asyncio.get_running_loop()
    upstream = socket.socket()
    upstream.setblocking(False)
    try:
        await loop.sock_connect(upstream, ("127.0.0.1", target))
    except OSError:
        client.close()
        upstream.close()
        return
    for s in (client, upstream):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def end() -> None:
        for d in directions:
            if not d.ended:
                d.end()
        client.close()
        upstream.close()

    directions: list[_Direction] = []
    directions += [_Direction(client, upstream, end), _Direction(upstream, client, end)]


async def _serve(pairs: list[tuple[int, int]]) -> None:
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[None]] = set()
    for listen, target in pairs:
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", listen))
        server.listen(128)
        server.setblocking(False)

        def accept(server: socket.socket = server, target: int = target) -> None:
            try:
                client, _ = server.accept()
            except BlockingIOError:
                return
            client.setblocking(False)
            task = asyncio.ensure_future(_relay(client, target))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        loop.add_reader(server.fileno(), accept)
    print("relay ready", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    """Relay each LISTEN:TARGET pair until killed."""
    pairs = [(int(a), int(b)) for a, b in (arg.split(":") for arg in sys.argv[1:])]
    uvloop.run(_serve(pairs))


if __name__ == "__main__":
    main()
