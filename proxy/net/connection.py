"""One client connection and its broker connection: the socket side of its conversation."""

from __future__ import annotations

import asyncio
import itertools
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import cast

import structlog

from kafka_policy_proxy.codec.errors import api_name
from kafka_policy_proxy.codec.framing import framed
from kafka_policy_proxy.proxy.filters.api import HookResult, RequestContext, Verdict
from kafka_policy_proxy.proxy.filters.chain import FilterChain
from kafka_policy_proxy.proxy.metrics import (
    ADDED_LATENCY,
    BYTES,
    MEMORY_CLOSES,
    MEMORY_PAUSED,
    SPLICED_BYTES,
    UPSTREAM_CONNECT_FAILURES,
    count_request,
)
from kafka_policy_proxy.proxy.net.actions import (
    Action,
    AwaitDecision,
    AwaitResponse,
    CloseConnection,
    ResumeReading,
    SendToBroker,
    SendToClient,
    StopReading,
)
from kafka_policy_proxy.proxy.net.conversation import JUDGED_TOO_LARGE, Conversation
from kafka_policy_proxy.proxy.net.frame_sized_reads import FrameSizedReads
from kafka_policy_proxy.proxy.net.memory_budget import PAUSE as MEMORY
from kafka_policy_proxy.proxy.net.memory_budget import MemoryBudget
from kafka_policy_proxy.proxy.net.response_order import Owed
from kafka_policy_proxy.proxy.net.spliced_body import SOURCE, Pipe, SplicedBody, available
from kafka_policy_proxy.proxy.tls.broker_side import explain, not_tls
from kafka_policy_proxy.proxy.tls.client_side import (
    CertificatePrincipalError,
    CertificatePrincipals,
)

# `framed` stays importable from here: the integration tests frame requests with it.
__all__ = ["ClientConnection", "UpstreamTarget", "framed"]

log = structlog.get_logger("proxy.net.connection")

# Returns the broker addresses to try, in order.
UpstreamTarget = Callable[[], list[tuple[str, int]]]

_HIGH_WATER = 4 * 1024 * 1024
# A streamed body (response or request) with at least this much still to come moves by splice
# (net.splice): below it, the hand-off's syscalls and loop turns cost more than the copy they
# save (bench.splice_bench: 256 KiB bodies cost 0.89 CPU-s/GB spliced, 0.70 copied; 1 MiB
# bodies 0.48 and 0.54).
SPLICE_AFTER = 512 * 1024
# The reason to pause while this connection alone holds limits.max_connection_buffered_bytes.
FULL = "connection-full"
_FULL_PAUSED = MEMORY_PAUSED.labels(reason="connection_cap")
_TO_BROKER = BYTES.labels(direction="client_to_broker")
_TO_CLIENT = BYTES.labels(direction="broker_to_client")
_SPLICED_TO_BROKER = SPLICED_BYTES.labels(direction="client_to_broker")
_SPLICED_TO_CLIENT = SPLICED_BYTES.labels(direction="broker_to_client")
_ids = itertools.count(1)
# The reason to pause the client transport while a request body moves by splice.
SPLICING = "splicing"


class ClientConnection(asyncio.Protocol):
    """Reads and writes both sockets, and carries out what the conversation returns."""

    def __init__(
        self,
        *,
        listener: str,
        target: UpstreamTarget,
        chain: FilterChain,
        max_frame_bytes: int,
        connect_timeout: float,
        budget: MemoryBudget,
        max_judged_bytes: int | None = None,
        max_buffered_bytes: int = 2**63,
        on_open: Callable[[ClientConnection], str | None],
        on_close: Callable[[ClientConnection], None],
        certificates: CertificatePrincipals | None = None,
        upstream_tls: ssl.SSLContext | None = None,
        splice: bool = False,
    ) -> None:
        self.id = next(_ids)
        self.listener = listener
        self._target = target
        self._chain = chain
        self._max_frame_bytes = max_frame_bytes
        self._max_judged_bytes = max_judged_bytes
        self._max_buffered_bytes = max_buffered_bytes  # this connection's own cap
        self._connect_timeout = connect_timeout
        self._budget = budget
        self.held = 0  # bytes charged to the memory budget
        self._on_open = on_open
        self._on_close = on_close
        self._certificates = certificates
        self._upstream_tls = upstream_tls
        # Bodies move by splice(2) only between two plaintext sockets (the listener's TLS is
        # the caller's to rule out).
        self._splice = splice and upstream_tls is None and available()
        self._pipes: list[Pipe] = []  # one a direction, made on first use
        self._body: SplicedBody | None = None  # a response body moving by splice now
        self._request_body: SplicedBody | None = None  # a request body moving by splice now
        self._conversation: Conversation | None = None
        self._client: asyncio.Transport | None = None
        self._upstream: asyncio.Transport | None = None
        self._broker_address = ("", 0)
        self._pauses: set[str] = set()
        self._client_full = False
        self._tasks: set[asyncio.Task[None]] = set()
        self.closed = asyncio.get_running_loop().create_future()
        self.log = log

    def reader(self) -> asyncio.BaseProtocol:
        """The protocol the client transport drives: this connection, behind reads sized to
        frame boundaries while bodies may move by splice (so that they are still in the
        socket when their header has been read)."""
        if not self._splice:
            return self
        return FrameSizedReads(
            self,
            lambda: 0 if self._conversation is None else self._conversation.request_rest,
            SPLICE_AFTER,
        )

    def tls_object(self) -> ssl.SSLObject | None:
        """The client side's TLS object (after the handshake), or None without TLS."""
        return None if self._client is None else self._client.get_extra_info("ssl_object")

    # --- client side -------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have the same API.
        self._client = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        address = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.log = log.bind(conn=self.id, client=address, listener=self.listener)
        via = transport.get_extra_info("proxied_by")  # the load balancer that sent a PROXY header
        if via is not None:
            self.log = self.log.bind(via=via)
        # Only now: a connection whose TLS handshake fails is never made, nor ever lost.
        refusal = self._on_open(self)
        if refusal is not None:
            self._fail(refusal)
            return
        self._budget.join(self)
        self._client.set_write_buffer_limits(high=_HIGH_WATER)
        principal = "User:ANONYMOUS"
        if self._certificates is not None:
            # SASL on the same connection, if any, replaces this principal later.
            try:
                principal = self._certificates.principal(transport) or principal
            except CertificatePrincipalError as exc:
                self._fail("client certificate refused", detail=str(exc))
                return
        self._conversation = Conversation(
            self._chain,
            connection_id=self.id,
            listener=self.listener,
            client_address=address,
            principal=principal,
            max_frame_bytes=self._max_frame_bytes,
            max_judged_bytes=self._max_judged_bytes,
            observe=count_request,
        )
        self.pause("connecting")
        self._spawn(self._connect_upstream(self._conversation))

    def data_received(self, data: bytes) -> None:
        _TO_BROKER.inc(len(data))
        if self._pauses and self._client is not None:
            # Read while paused: uvloop starts reading after connection_made, undoing the
            # pause made there (CPython's asyncio fixed the same, gh-103607). Unnoticed, every
            # later pause looked done and the client was read without bound (issue 31).
            self._client.pause_reading()
        conversation = self._conversation
        if conversation is not None:
            if self._upstream is not None and conversation.client_passes(len(data)):
                self._upstream.write(data)
                self.recount()
            else:
                self.act(conversation.client_data(data))
            if self._splice:
                self._splice_due(conversation)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        conversation = self._conversation
        if conversation is not None:
            if conversation.pending_bytes and not conversation.closed:
                self.log.warning("client closed mid-frame", reason="truncated frame")
            conversation.connection_lost()
        self._client = None
        self._close_upstream()
        self._finish()

    def from_broker(self, conversation: Conversation, data: bytes) -> None:
        """Bytes from the broker: straight to the client inside a streamed response."""
        if self._client is not None and conversation.broker_passes(len(data)):
            self._client.write(data)
            self.recount()
        else:
            self.act(conversation.broker_data(data))
        if self._splice:
            self._splice_due(conversation)

    def _splice_due(self, conversation: Conversation) -> None:
        # A body streaming now with enough of it still to come moves by splice (a request
        # may start streaming on a read, or when a hold ends: the broker connected, a decision).
        if conversation.to_send >= SPLICE_AFTER and self._request_body is None:
            self._splice_request(conversation)
        if conversation.streaming >= SPLICE_AFTER and self._body is None:
            self._splice_response(conversation)

    def _splice_response(self, conversation: Conversation) -> None:
        # The rest of the response streaming now moves in the kernel (proxy/net/spliced_body.py)
        # while the broker transport reads nothing; it reads again once the body is out.
        client, upstream = self._client, self._upstream
        if client is None or upstream is None:
            return
        count = conversation.streaming
        body = self._spliced(upstream, client, count, _spliced_to_client)
        if body is None:
            return
        body.done = lambda end: self._response_spliced(conversation, count, end)
        upstream.pause_reading()
        self._body = body
        body.allow_reading(not (self._client_full or MEMORY in self._pauses))
        body.start()

    def _response_spliced(self, conversation: Conversation, count: int, end: str | None) -> None:
        self._body = None
        if end is None:
            self.act(conversation.response_spliced(count))
            self._read_upstream()
        else:
            self._ended_mid_body(end, source=self._upstream, destination=self._client)
        self.recount()

    def _splice_request(self, conversation: Conversation) -> None:
        # The rest of a request no filter reads (a large Produce) moves in the kernel while the
        # client transport reads nothing; it reads the next request once the body is out.
        client, upstream = self._client, self._upstream
        if client is None or upstream is None:
            return
        count = conversation.to_send
        body = self._spliced(client, upstream, count, _spliced_to_broker)
        if body is None:
            return
        body.done = lambda end: self._request_spliced(conversation, count, end)
        self.pause(SPLICING)
        self._request_body = body
        body.allow_reading(self._pauses == {SPLICING})
        body.start()

    def _request_spliced(self, conversation: Conversation, count: int, end: str | None) -> None:
        self._request_body = None
        if end is None:
            self.act(conversation.request_spliced(count))
            self.resume(SPLICING)
        else:
            self._ended_mid_body(end, source=self._client, destination=self._upstream)
        self.recount()

    def _spliced(
        self,
        source: asyncio.Transport,
        destination: asyncio.Transport,
        count: int,
        moved_in: Callable[[int], None],
    ) -> SplicedBody | None:
        # A body to move, with its own pipe (a response and a request may move at once).
        busy = {b.pipe for b in (self._body, self._request_body) if b is not None}
        pipe = next((p for p in self._pipes if p not in busy), None)
        if pipe is None:
            pipe = Pipe()
            self._pipes.append(pipe)
        try:
            return SplicedBody(
                pipe,
                _fd(source),
                _fd(destination),
                count,
                destination_clear=lambda: destination.get_write_buffer_size() == 0,
                moved_in=moved_in,
            )
        except OSError as exc:  # out of descriptors: this body is copied as before
            self.log.warning("cannot splice", detail=str(exc))
            return None

    def _ended_mid_body(
        self, end: str, *, source: asyncio.Transport | None, destination: asyncio.Transport | None
    ) -> None:
        # As when the transport that ends sees it itself: connection_lost closes the other side
        # (and logs a client that closed mid-frame).
        side = source if end.startswith(SOURCE) else destination
        if side is self._client:
            self.abort()
        elif side is not None:
            side.abort()

    def pause_writing(self) -> None:
        self._client_full = True
        self._read_upstream()

    def resume_writing(self) -> None:
        self._client_full = False
        self._read_upstream()

    def _read_upstream(self) -> None:
        # Broker bytes wait while the client's write buffer is full or memory is short.
        if self._body is not None:  # the broker transport stays paused until the body is out
            self._body.allow_reading(not (self._client_full or MEMORY in self._pauses))
        elif self._upstream is not None:
            if self._client_full or MEMORY in self._pauses:
                self._upstream.pause_reading()
            else:
                self._upstream.resume_reading()

    # --- carrying out the conversation's actions ----------------------------------------------

    def act(self, actions: list[Action]) -> None:
        """Carry out the conversation's actions, in order."""
        for action in actions:
            kind = type(action)
            if kind is SendToBroker:
                if self._upstream is not None:
                    self._upstream.writelines(cast(SendToBroker, action).data)
            elif kind is SendToClient:
                if self._client is not None:
                    self._client.writelines(cast(SendToClient, action).data)
            elif kind is AwaitDecision:
                decision = cast(AwaitDecision, action)
                self._spawn(self._decide(decision.ctx, decision.pending))
            elif kind is AwaitResponse:
                response = cast(AwaitResponse, action)
                self._spawn(self._respond(response.owed, response.pending))
            elif kind is StopReading:
                self.pause("busy")
            elif kind is ResumeReading:
                self.resume("busy")
            else:
                close = cast(CloseConnection, action)
                if close.reason is None:
                    self.close()
                else:
                    if close.reason == JUDGED_TOO_LARGE:
                        MEMORY_CLOSES.labels(reason="judged_request_too_large").inc()
                    self._fail(close.reason, **close.details)
        if self._splice and self._conversation is not None:
            self._splice_due(self._conversation)
        self.recount()

    def recount(self) -> None:
        """Charge the memory budget the change in what this connection buffers."""
        held = 0 if self._conversation is None else self._conversation.buffered_bytes
        if self._client is not None:
            held += self._client.get_write_buffer_size()
        if self._upstream is not None:
            held += self._upstream.get_write_buffer_size()
        for body in (self._body, self._request_body):
            if body is not None:
                held += body.in_pipe
        if held != self.held and not self.closed.done():
            delta, self.held = held - self.held, held
            if held >= self._max_buffered_bytes:
                if FULL not in self._pauses:
                    _FULL_PAUSED.inc()
                    self.pause(FULL)
            elif FULL in self._pauses:
                _FULL_PAUSED.dec()
                self.resume(FULL)
            self._budget.charge(self, delta)

    def stalled(self, held: int, stalled_s: float) -> None:
        """The memory budget gave up on this connection: drop it, and say why."""
        if self._client is not None:
            principal = self._conversation.principal if self._conversation is not None else None
            self.log.warning(
                "closing client connection",
                reason="stalled while the memory budget is exhausted",
                principal=principal,
                buffered_bytes=held,
                stalled_s=round(stalled_s, 1),
            )
            MEMORY_CLOSES.labels(reason="stalled").inc()
        self.abort()

    async def _decide(self, ctx: RequestContext, pending: Awaitable[Verdict]) -> None:
        started = time.perf_counter()
        verdict = await pending
        ADDED_LATENCY.labels(api=api_name(ctx.header.api_key)).observe(
            time.perf_counter() - started
        )
        if self._conversation is not None:
            self.act(self._conversation.decided(ctx, verdict))

    async def _respond(self, owed: Owed, pending: Awaitable[HookResult]) -> None:
        assert self._conversation is not None
        try:
            result = await pending
        except Exception as exc:
            self.act(self._conversation.response_failed(exc))
            return
        self.act(self._conversation.response_ready(owed, result))

    # --- lifecycle -----------------------------------------------------------------------------

    async def _connect_upstream(self, conversation: Conversation) -> None:
        loop = asyncio.get_running_loop()
        errors = []
        try:
            candidates = self._target()
        except LookupError as exc:
            self._fail("no broker for this listener", detail=str(exc))
            return
        tls = self._upstream_tls

        def upstream() -> asyncio.BaseProtocol:
            protocol = _Upstream(self, conversation)
            if not self._splice:
                return protocol
            return FrameSizedReads(protocol, lambda: conversation.response_rest, SPLICE_AFTER)

        for host, port in candidates:
            try:
                transport, _ = await asyncio.wait_for(
                    loop.create_connection(
                        upstream,
                        host,
                        port,
                        ssl=tls,
                        server_hostname=host if tls else None,
                    ),
                    self._connect_timeout,
                )
            except ssl.SSLError as exc:
                errors.append(str(explain(exc, host, port)))
                continue
            except ConnectionResetError:
                errors.append(str(not_tls(host, port)) if tls else f"{host}:{port}: reset")
                continue
            except (OSError, TimeoutError) as exc:
                errors.append(f"{host}:{port}: {exc or type(exc).__name__}")
                continue
            if self._client is None:
                transport.close()
                return
            self._upstream = transport
            self._broker_address = (host, port)
            self._upstream.set_write_buffer_limits(high=_HIGH_WATER)
            self.log = self.log.bind(broker=f"{host}:{port}")
            if MEMORY in self._pauses:
                transport.pause_reading()
            self.act(conversation.broker_connected())
            self.resume("connecting")
            return
        UPSTREAM_CONNECT_FAILURES.labels(listener=self.listener).inc()
        self._fail("cannot connect to broker", detail="; ".join(errors))

    def _fail(self, reason: str, **details: object) -> None:
        """Log why, then close this client's connection (and its broker connection)."""
        if self._client is None:
            return
        principal = self._conversation.principal if self._conversation is not None else None
        self.log.warning("closing client connection", reason=reason, principal=principal, **details)
        self.close()

    def close(self) -> None:
        """Close both sides now; buffered writes to the client still go out."""
        if self._client is not None:
            self._client.close()
        self._close_upstream()

    def drain(self) -> None:
        """Stop reading requests; close once every response owed has been written."""
        if self._conversation is None:
            self.pause("draining")
            self.close()
            return
        if not self._conversation.sending:  # else it stops reading after that request
            self.pause("draining")
        self.act(self._conversation.drain())

    def abort(self) -> None:
        """Drop the connection without waiting."""
        if self._client is not None:
            self._client.abort()
        self._close_upstream()

    def upstream_lost(self, exc: Exception | None) -> None:
        """The broker connection ended: the client must reconnect."""
        self._upstream = None
        self._cancel_body()
        if self._client is not None:
            if isinstance(exc, ssl.SSLError) and self._upstream_tls is not None:
                host, port = self._broker_address
                self.log.warning("broker connection closed", detail=str(explain(exc, host, port)))
            else:
                self.log.info("broker connection closed", detail=str(exc) if exc else None)
            self._client.close()

    def _cancel_body(self) -> None:
        # The bodies' descriptor copies would keep both sockets open after their transports close.
        for body in (self._body, self._request_body):
            if body is not None:
                body.cancel()
        self._body = self._request_body = None

    def _close_upstream(self) -> None:
        self._cancel_body()
        if self._upstream is not None:
            self._upstream.close()
            self._upstream = None

    def _finish(self) -> None:
        self._cancel_body()
        for pipe in self._pipes:
            pipe.close()
        for task in self._tasks:
            task.cancel()
        if FULL in self._pauses:
            self._pauses.discard(FULL)
            _FULL_PAUSED.dec()
        if not self.closed.done():
            self._budget.leave(self)
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
        if reason == MEMORY:
            self._read_upstream()
        self._read_request_body()

    def resume(self, reason: str) -> None:
        """Drop one reason to pause; read the client again when none is left."""
        self._pauses.discard(reason)
        if not self._pauses and self._client is not None:
            self._client.resume_reading()
        if reason == MEMORY:
            self._read_upstream()
        self._read_request_body()

    def _read_request_body(self) -> None:
        # A request body moving by splice reads the client while nothing else stops reading it.
        if self._request_body is not None:
            self._request_body.allow_reading(self._pauses == {SPLICING})


class _Upstream(asyncio.Protocol):
    """The broker side of a proxied connection: its bytes go to the conversation."""

    def __init__(self, conn: ClientConnection, conversation: Conversation) -> None:
        self._conn = conn
        self._conversation = conversation

    def data_received(self, data: bytes) -> None:
        _TO_CLIENT.inc(len(data))
        self._conn.from_broker(self._conversation, data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._conn.upstream_lost(exc)

    def pause_writing(self) -> None:
        self._conn.pause("broker-busy")

    def resume_writing(self) -> None:
        self._conn.resume("broker-busy")


def _fd(transport: asyncio.Transport) -> int:
    """The descriptor of a transport's socket."""
    return int(transport.get_extra_info("socket").fileno())


def _spliced_to_client(size: int) -> None:
    """Count bytes a response body moved by splice."""
    _TO_CLIENT.inc(size)
    _SPLICED_TO_CLIENT.inc(size)


def _spliced_to_broker(size: int) -> None:
    """Count bytes a request body moved by splice."""
    _TO_BROKER.inc(size)
    _SPLICED_TO_BROKER.inc(size)
