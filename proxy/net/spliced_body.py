"""The body of a pass-through frame moved socket to socket in the kernel, with splice(2).

Kafka's data path needs each response's correlation id and each request's header, never the
record bytes behind them. Once the conversation has read the head of a large response that
passes through untouched (a Fetch, mostly), or the header of a large request no filter reads
(a Produce), the rest of it (`count` bytes) goes from the source socket into a pipe and from
the pipe to the destination socket with `os.splice`: never copied into Python.

The hand-off, on plaintext connections only (TLS bytes must pass through OpenSSL):
- The connection pauses the source transport's reading (the broker's for a response, the
  client's for a request), so it reads nothing more and the body's bytes wait in the socket.
  The transports stay open and own their sockets; while the body moves the destination
  transport has nothing to write (the conversation writes nothing into the middle of a frame
  being streamed, and nothing is read that could make it).
- The body is moved on `os.dup` copies of the two descriptors: the event loop refuses reader
  and writer callbacks on a descriptor a transport owns, and the copies name the same
  sockets. Readiness is driven by the loop's own `add_reader` (source) and `add_writer`
  (destination) callbacks on them, so the loop keeps serving every other connection between
  two steps. Every splice is SPLICE_F_NONBLOCK on non-blocking sockets: EAGAIN arms the
  callback and returns; one step moves at most STEP_BYTES, so a fast pair cannot starve
  the others.
- The first byte is written only once the destination transport's write buffer is empty
  (the head of the frame went there), so the bytes arrive in order.
- Back-pressure: the pipe holds at most its capacity; while it is full, or the connection
  says not to read (a slow client, the memory budget), the source is not read, so the
  sender's TCP window closes as it does for a paused transport. The bytes in the pipe are
  reported (`in_pipe`) and charged to the memory budget like a write buffer; the bytes read
  are counted (`moved_in`: the byte counters).
- It ends when all `count` bytes are in the destination (`done(None)`), or when the source
  closes or fails mid-body (what was read is written out first, then `done(reason)`, the
  reason starting with SOURCE), or when the destination fails (`done(reason)` at once,
  starting with DESTINATION). The connection then aborts the side that ended, as if its
  transport had seen it. The copies are closed then, or by
  `cancel`, which every close path of the connection calls: a copy would keep its socket
  open after the transport closed it.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
from collections.abc import Callable

# Ask for a pipe this large (fewer splices per body); the kernel's default (64 KiB) is kept
# when the user's pipe allowance is spent.
PIPE_BYTES = 1 << 20
# The most one readiness callback moves before the loop serves anything else.
STEP_BYTES = 4 << 20
_IN_FLAGS = getattr(os, "SPLICE_F_MOVE", 0) | getattr(os, "SPLICE_F_NONBLOCK", 0)
_OUT_FLAGS = getattr(os, "SPLICE_F_MOVE", 0) | getattr(os, "SPLICE_F_NONBLOCK", 0)
# How the reason `done` is given starts: which side ended the body.
SOURCE = "source"
DESTINATION = "destination"


def available() -> bool:
    """Whether this platform has splice(2) (Linux, Python 3.10+)."""
    return hasattr(os, "splice") and hasattr(os, "SPLICE_F_NONBLOCK")


class Pipe:
    """A connection's pipe, made on first use and kept until it closes (its pages are the
    kernel's, allocated only while bytes are in it)."""

    def __init__(self) -> None:
        self.read_fd = -1
        self.write_fd = -1
        self.capacity = 0

    def open(self) -> None:
        """Make the pipe, if it is not made yet."""
        if self.read_fd >= 0:
            return
        self.read_fd, self.write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            self.capacity = fcntl.fcntl(self.write_fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        except OSError:
            self.capacity = fcntl.fcntl(self.write_fd, fcntl.F_GETPIPE_SZ)

    def close(self) -> None:
        """Close both ends (any bytes in it are dropped)."""
        for fd in (self.read_fd, self.write_fd):
            if fd >= 0:
                os.close(fd)
        self.read_fd = self.write_fd = -1


class SplicedBody:
    """Moves `count` bytes from socket `source` to socket `destination` through `pipe`."""

    def __init__(
        self,
        pipe: Pipe,
        source: int,
        destination: int,
        count: int,
        *,
        destination_clear: Callable[[], bool],
        moved_in: Callable[[int], None],
    ) -> None:
        self._loop = asyncio.get_running_loop()
        pipe.open()
        self.pipe = pipe
        self._source = os.dup(source)
        try:
            self._destination = os.dup(destination)
        except OSError:
            os.close(self._source)
            raise
        self.left = count  # still to read from the source
        self.in_pipe = 0
        self._clear = destination_clear  # the destination transport has nothing buffered
        self._moved_in = moved_in  # told how many bytes each read took (the byte counters)
        self.done: Callable[[str | None], None] = _nobody  # told how it ended; set before start
        self._reading_allowed = True
        self._source_end: str | None = None  # why the source ended before `count`
        self._reader = self._writer = False
        self.finished = False

    def start(self) -> None:
        """Begin moving bytes."""
        self._step()

    def allow_reading(self, allowed: bool) -> None:
        """Read the source only while allowed (a slow client, the memory budget)."""
        if allowed != self._reading_allowed:
            self._reading_allowed = allowed
            if not self.finished:
                self._step()

    def cancel(self) -> None:
        """Stop now and close the descriptors' copies, without calling `done`."""
        if not self.finished:
            self.finished = True
            self._unwatch()
            os.close(self._source)
            os.close(self._destination)

    def _step(self) -> None:
        moved = 0
        want_read = want_write = False
        pipe = self.pipe
        writable = self._clear()
        while moved < STEP_BYTES:
            progress = 0
            if self.in_pipe:
                if not writable:
                    want_write = True
                else:
                    try:
                        n = os.splice(
                            pipe.read_fd, self._destination, self.in_pipe, flags=_OUT_FLAGS
                        )
                    except BlockingIOError:
                        want_write = True
                    except OSError as exc:
                        self._finish(f"{DESTINATION}: {exc.strerror or exc}")
                        return
                    else:
                        self.in_pipe -= n
                        progress += n
                        want_write = False
            space = pipe.capacity - self.in_pipe
            if self.left and space and self._reading_allowed and self._source_end is None:
                try:
                    n = os.splice(
                        self._source, pipe.write_fd, min(self.left, space), flags=_IN_FLAGS
                    )
                except BlockingIOError:
                    want_read = True
                except OSError as exc:
                    self._source_end = f"{SOURCE}: {exc.strerror or exc}"
                else:
                    if n == 0:
                        self._source_end = f"{SOURCE} closed mid-body"
                    else:
                        self.left -= n
                        self.in_pipe += n
                        progress += n
                        self._moved_in(n)
                        want_read = False
            if not self.in_pipe and (not self.left or self._source_end is not None):
                self._finish(self._source_end)
                return
            if not progress:
                break
            moved += progress
        if moved >= STEP_BYTES:  # more may be ready: come back after the loop's other work
            want_read = want_read or bool(self.left and self._source_end is None)
            want_write = want_write or bool(self.in_pipe)
        space = pipe.capacity - self.in_pipe
        # Never watch a source with nothing left to read: what it has now is the next frame's,
        # and a readable source would call back without end.
        self._watch(
            want_read
            and bool(self.left and space)
            and self._reading_allowed
            and self._source_end is None,
            want_write,
        )

    def _watch(self, read: bool, write: bool) -> None:
        loop = self._loop
        if read != self._reader:
            self._reader = read
            if read:
                loop.add_reader(self._source, self._step)
            else:
                loop.remove_reader(self._source)
        if write != self._writer:
            self._writer = write
            if write:
                loop.add_writer(self._destination, self._step)
            else:
                loop.remove_writer(self._destination)

    def _unwatch(self) -> None:
        self._watch(False, False)

    def _finish(self, reason: str | None) -> None:
        self.cancel()
        self.done(reason)


def _nobody(end: str | None) -> None:
    """The default `done`: nobody listens."""
