"""One client connection and its broker connection: frames in, frames out, responses in order."""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, cast

import structlog

from codec.api_versions import supports
from codec.errors import CodecError
from codec.header import (
    API_VERSIONS,
    PRODUCE,
    RequestHeader,
    peek_request_header,
    produce_acks,
    response_header,
    response_header_size,
)
from proxy.tls import CertificatePrincipalError, CertificatePrincipals

log = structlog.get_logger("proxy.connection")

# Takes a response body (after the header) and returns the body to send to the client.
ResponseTransform = Callable[[bytes], bytes | Awaitable[bytes]]
# Returns the broker addresses to try, in order.
UpstreamTarget = Callable[[], list[tuple[str, int]]]

_SIZE = 4
_HIGH_WATER = 4 * 1024 * 1024
_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class Forward:
    """Send this request frame (size prefix included) to the broker; transform its response."""

    frame: bytes
    transform: ResponseTransform | None = None


@dataclass(frozen=True, slots=True)
class Reply:
    """Answer the request from the proxy with this response body."""

    body: bytes


Action = Forward | Reply


class Interceptor(Protocol):
    """Handles the requests of the API keys it is registered for."""

    def on_request(
        self, conn: ClientConnection, header: RequestHeader, frame: bytes
    ) -> Action | Awaitable[Action]:
        """Decide what to do with one request frame (size prefix included)."""
        ...


class _Slot:
    """A response owed to the client; slots are written strictly in request order."""

    __slots__ = ("frame",)

    def __init__(self, frame: bytes | None = None) -> None:
        self.frame = frame


class _InFlight:
    __slots__ = ("api_key", "api_version", "correlation_id", "slot", "transform")

    def __init__(
        self, header: RequestHeader, slot: _Slot, transform: ResponseTransform | None
    ) -> None:
        self.correlation_id = header.correlation_id
        self.api_key = header.api_key
        self.api_version = header.api_version
        self.slot = slot
        self.transform = transform


def framed(*parts: bytes) -> bytes:
    """Join parts behind a 4-byte size prefix."""
    body = b"".join(parts)
    return len(body).to_bytes(_SIZE, "big") + body


class _FrameSplitter:
    """Cuts a byte stream into size-prefixed frames, checking each size before buffering it."""

    __slots__ = ("_buffer", "_limit")

    def __init__(self, limit: int) -> None:
        self._buffer = bytearray()
        self._limit = limit

    @property
    def pending(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes) -> list[bytes]:
        """Return the complete frames (size prefix included); raise ValueError on a bad size."""
        buf: bytes | bytearray
        if self._buffer:
            self._buffer += data
            buf = self._buffer
        else:
            buf = data
        frames = []
        pos, total = 0, len(buf)
        with memoryview(buf) as view:
            while total - pos >= _SIZE:
                size = int.from_bytes(view[pos : pos + _SIZE], "big", signed=True)
                if size < 0 or size > self._limit:
                    raise ValueError(f"frame size {size} is outside 0..{self._limit}")
                end = pos + _SIZE + size
                if end > total:
                    break
                frames.append(buf[pos:end] if isinstance(buf, bytes) else view[pos:end].tobytes())
                pos = end
        if buf is self._buffer:
            del self._buffer[:pos]
        elif pos < total:
            self._buffer += buf[pos:]
        return frames


class ClientConnection(asyncio.Protocol):
    """Proxies one client connection to one broker connection."""

    def __init__(
        self,
        *,
        listener: str,
        target: UpstreamTarget,
        interceptors: dict[int, Interceptor],
        max_frame_bytes: int,
        connect_timeout: float,
        on_open: Callable[[ClientConnection], None],
        on_close: Callable[[ClientConnection], None],
        certificates: CertificatePrincipals | None = None,
    ) -> None:
        self.id = next(_ids)
        self.listener = listener
        self.client_address = "?"
        # Who the client is, as the broker has confirmed it (SASL) or TLS has proven it.
        self.principal = "User:ANONYMOUS"
        self._target = target
        self._interceptors = interceptors
        self._connect_timeout = connect_timeout
        self._on_open = on_open
        self._on_close = on_close
        self._certificates = certificates
        self._requests = _FrameSplitter(max_frame_bytes)
        self._client: asyncio.Transport | None = None
        self._upstream: _Upstream | None = None
        self._queue: deque[_Slot] = deque()
        self._inflight: deque[_InFlight] = deque()
        self._held: deque[bytes] = deque()
        # Requests are held while the broker connection opens or an interceptor awaits.
        self._busy = True
        self._pauses: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._draining = False
        self._streaming = False  # a response is being passed through to the client
        self.closed = asyncio.get_running_loop().create_future()
        self._closers: list[Callable[[], object]] = []
        self.log = log

    # --- client side -------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Only now: a connection whose TLS handshake fails is never made, nor ever lost.
        self._on_open(self)
        # uvloop's transports are not asyncio.Transport subclasses, but have the same API.
        self._client = cast(asyncio.Transport, transport)
        self._client.set_write_buffer_limits(high=_HIGH_WATER)
        peer = transport.get_extra_info("peername")
        self.client_address = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.log = log.bind(conn=self.id, client=self.client_address, listener=self.listener)
        if self._certificates is not None:
            # SASL on the same connection, if any, replaces this principal later.
            try:
                self.principal = self._certificates.principal(transport) or self.principal
            except CertificatePrincipalError as exc:
                self.fail("client certificate refused", detail=str(exc))
                return
        self.pause("connecting")
        self._spawn(self._connect_upstream())

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._requests.feed(data)
        except ValueError as exc:
            self.fail("bad frame size", detail=str(exc))
            return
        for frame in frames:
            if self._busy:
                self._held.append(frame)
            else:
                self._on_request(frame)
            if self._client is None:
                return

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self._requests.pending and self._client is not None:
            self.log.warning("client closed mid-frame", reason="truncated frame")
        self._client = None
        self._close_upstream()
        self._finish()

    def pause_writing(self) -> None:
        if self._upstream is not None:
            self._upstream.transport.pause_reading()

    def resume_writing(self) -> None:
        if self._upstream is not None:
            self._upstream.transport.resume_reading()

    # --- requests ------------------------------------------------------------------------------

    def _on_request(self, frame: bytes) -> None:
        try:
            header = peek_request_header(frame, _SIZE)
        except CodecError as exc:
            self.fail("malformed request header", detail=str(exc))
            return
        key = header.api_key
        if key != API_VERSIONS and not supports(key, header.api_version):
            # A broker closes the connection on an unsupported version; so does the proxy,
            # rather than forward something it cannot check.
            self.fail("unsupported API or version", api_key=key, api_version=header.api_version)
            return
        interceptor = self._interceptors.get(key)
        if interceptor is None:
            if key == PRODUCE and self._acks_zero(frame, header):
                self._send_upstream(frame)
            else:
                self._forward(header, frame, None)
            return
        try:
            action = interceptor.on_request(self, header, frame)
        except Exception as exc:
            self._refuse(exc)
            return
        if isinstance(action, Forward | Reply):
            self._act(header, action)
        else:
            self._hold_until(header, action)

    def _refuse(self, exc: Exception) -> None:
        # A request the proxy cannot handle never reaches the broker, and never hangs.
        if isinstance(exc, CodecError):
            self.fail("cannot decode request", detail=str(exc))
        else:
            self.log.exception("request handling failed")
            self.fail("internal error", detail=f"{type(exc).__name__}: {exc}")

    def _acks_zero(self, frame: bytes, header: RequestHeader) -> bool:
        try:
            return produce_acks(frame, header) == 0
        except CodecError:
            # Let the broker judge a malformed Produce; expect its answer.
            return False

    def _act(self, header: RequestHeader, action: Action) -> None:
        if isinstance(action, Reply):
            self._queue.append(_Slot(framed(response_header(*_ids_of(header)), action.body)))
            self._flush()
        else:
            self._forward(header, action.frame, action.transform)

    def _hold_until(self, header: RequestHeader, pending: Awaitable[Action]) -> None:
        # Later requests wait, so the broker sees this connection's requests in order.
        self._busy = True
        self.pause("busy")

        async def run() -> None:
            try:
                action = await pending
            except Exception as exc:
                self._refuse(exc)
                return
            self._act(header, action)
            self._release("busy")

        self._spawn(run())

    def _release(self, reason: str) -> None:
        # Process held requests in order until one of them makes the connection busy again.
        self._busy = False
        while self._held and not self._busy and self._client is not None:
            self._on_request(self._held.popleft())
        if not self._busy:
            self.resume(reason)

    def _forward(
        self, header: RequestHeader, frame: bytes, transform: ResponseTransform | None
    ) -> None:
        slot = _Slot()
        self._queue.append(slot)
        self._inflight.append(_InFlight(header, slot, transform))
        self._send_upstream(frame)

    def _send_upstream(self, frame: bytes) -> None:
        # Requests are held until the broker is connected; None here means we are closing.
        if self._upstream is not None:
            self._upstream.transport.write(frame)

    # --- responses -----------------------------------------------------------------------------

    def on_response(self, frame: bytes) -> None:
        """Match one broker response to the oldest request in flight."""
        if not self._inflight:
            self.fail("broker sent a response nobody asked for")
            return
        entry = self._inflight.popleft()
        correlation_id = int.from_bytes(frame[_SIZE : _SIZE + 4], "big", signed=True)
        if correlation_id != entry.correlation_id:
            self.fail(
                "broker response out of order",
                expected=entry.correlation_id,
                got=correlation_id,
            )
            return
        if entry.transform is None:
            entry.slot.frame = frame
            self._flush()
            return
        try:
            inner = frame[_SIZE:]
            size = response_header_size(inner, entry.api_key, entry.api_version)
            result = entry.transform(inner[size:])
        except (CodecError, ValueError) as exc:
            self.fail("cannot rewrite broker response", detail=str(exc))
            return
        if isinstance(result, bytes):
            entry.slot.frame = framed(inner[:size], result)
            self._flush()
        else:
            self._spawn(self._complete(entry.slot, inner[:size], result))

    def start_stream(self, correlation_id: bytes) -> bool:
        """Take the next response as a pass-through stream, if nothing has to wait for it."""
        if not self._inflight or not self._queue or self._client is None:
            return False
        entry = self._inflight[0]
        if entry.transform is not None or self._queue[0] is not entry.slot:
            return False
        if int.from_bytes(correlation_id, "big", signed=True) != entry.correlation_id:
            return False
        self._inflight.popleft()
        self._queue.popleft()
        self._streaming = True
        return True

    def write_client(self, data: bytes) -> None:
        """Write response bytes straight to the client."""
        if self._client is not None:
            self._client.write(data)

    def end_stream(self) -> None:
        """A streamed response is complete; responses queued behind it may go now."""
        self._streaming = False
        self._flush()

    async def _complete(self, slot: _Slot, header: bytes, pending: Awaitable[bytes]) -> None:
        try:
            body = await pending
        except (CodecError, ValueError, OSError) as exc:
            self.fail("cannot rewrite broker response", detail=str(exc))
            return
        slot.frame = framed(header, body)
        self._flush()

    def _flush(self) -> None:
        queue, client = self._queue, self._client
        # Nothing may be written into the middle of a response being streamed.
        if client is None or self._streaming:
            return
        while queue and queue[0].frame is not None:
            frame = queue.popleft().frame
            assert frame is not None
            client.write(frame)
        if self._draining and not queue:
            self.close()

    # --- lifecycle -----------------------------------------------------------------------------

    async def _connect_upstream(self) -> None:
        loop = asyncio.get_running_loop()
        errors = []
        try:
            candidates = self._target()
        except LookupError as exc:
            self.fail("no broker for this listener", detail=str(exc))
            return
        for host, port in candidates:
            try:
                _transport, upstream = await asyncio.wait_for(
                    loop.create_connection(lambda: _Upstream(self), host, port),
                    self._connect_timeout,
                )
            except (OSError, TimeoutError) as exc:
                errors.append(f"{host}:{port}: {exc or type(exc).__name__}")
                continue
            if self._client is None:
                upstream.transport.close()
                return
            self._upstream = upstream
            self.log = self.log.bind(broker=f"{host}:{port}")
            self._release("connecting")
            return
        self.fail("cannot connect to broker", detail="; ".join(errors))

    def fail(self, reason: str, **details: object) -> None:
        """Log why, then close this client's connection (and its broker connection)."""
        if self._client is None:
            return
        self.log.warning("closing client connection", reason=reason, **details)
        self.close()

    def close(self) -> None:
        """Close both sides now; buffered writes to the client still go out."""
        if self._client is not None:
            self._client.close()
        self._close_upstream()

    def drain(self) -> None:
        """Stop reading requests; close once every response owed has been written."""
        self._draining = True
        self.pause("draining")
        if not self._queue and not self._streaming:
            self.close()

    def abort(self) -> None:
        """Drop the connection without waiting."""
        if self._client is not None:
            self._client.abort()
        self._close_upstream()

    def upstream_lost(self, exc: Exception | None) -> None:
        """The broker connection ended: the client must reconnect."""
        self._upstream = None
        if self._client is not None:
            self.log.info("broker connection closed", detail=str(exc) if exc else None)
            self._client.close()

    def _close_upstream(self) -> None:
        if self._upstream is not None:
            self._upstream.transport.close()
            self._upstream = None

    def on_closed(self, callback: Callable[[], object]) -> None:
        """Call this when the connection has closed (interceptors drop per-connection state)."""
        self._closers.append(callback)

    def _finish(self) -> None:
        for task in self._tasks:
            task.cancel()
        for callback in self._closers:
            callback()
        if not self.closed.done():
            self.closed.set_result(None)
            self._on_close(self)

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def pause(self, reason: str) -> None:
        """Stop reading the client while any reason to pause holds."""
        if not self._pauses and self._client is not None:
            self._client.pause_reading()
        self._pauses.add(reason)

    def resume(self, reason: str) -> None:
        """Drop one reason to pause; read the client again when none is left."""
        self._pauses.discard(reason)
        if not self._pauses and self._client is not None:
            self._client.resume_reading()


def _ids_of(header: RequestHeader) -> tuple[int, int, int]:
    return header.correlation_id, header.api_key, header.api_version


class _Upstream(asyncio.Protocol):
    """The broker side of a proxied connection."""

    def __init__(self, conn: ClientConnection) -> None:
        self._conn = conn
        # Broker responses are trusted for size; only a negative size is an error.
        self._responses = _FrameSplitter(2**31 - 1)
        self._streaming = 0  # bytes of the current response still to pass straight through
        self.transport: asyncio.Transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(high=_HIGH_WATER)

    def data_received(self, data: bytes) -> None:
        conn = self._conn
        while data:
            if self._streaming:
                data = self._stream(data)
                continue
            # A large response that starts here and needs no rewriting is passed through as it
            # arrives, instead of being buffered and copied whole (Fetch responses, mostly).
            if not self._responses.pending and len(data) >= 8:
                size = int.from_bytes(data[:4], "big", signed=True)
                if size + 4 > len(data) and conn.start_stream(data[4:8]):
                    self._streaming = size + 4
                    continue
            try:
                frames = self._responses.feed(data)
            except ValueError as exc:
                conn.fail("bad frame size from broker", detail=str(exc))
                return
            for frame in frames:
                conn.on_response(frame)
            return

    def _stream(self, data: bytes) -> bytes:
        size = min(self._streaming, len(data))
        self._conn.write_client(data if size == len(data) else data[:size])
        self._streaming -= size
        if not self._streaming:
            self._conn.end_stream()
        return data[size:]

    def connection_lost(self, exc: Exception | None) -> None:
        self._conn.upstream_lost(exc)

    def pause_writing(self) -> None:
        self._conn.pause("broker-busy")

    def resume_writing(self) -> None:
        self._conn.resume("broker-busy")
