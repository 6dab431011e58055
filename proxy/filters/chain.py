"""The filter chain: each request goes through the filters that handle its API key, in order.

A `GateFilter` (admission) opens a turn: the filters after it, for that request, run inside
the gate's turn, so the whole of a guarded request's work (decode, fact reads, judging,
audit) is done in a slot the gate grants fairly. The broker's answer is not waited for in it.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import replace

import structlog

from kafka_policy_proxy.codec.errors import CodecError
from kafka_policy_proxy.proxy.filters.api import (
    VERDICT_TYPES,
    Answer,
    Close,
    Filter,
    Forward,
    ForwardModified,
    HookResult,
    RequestContext,
    ResponseHook,
    Verdict,
    WithPrincipal,
)

log = structlog.get_logger("proxy.filters")


class GateFilter(Filter):
    """A filter whose later filters run inside a turn it grants (`turn`), once it forwards."""

    def turn(self, ctx: RequestContext) -> AbstractAsyncContextManager[None]:
        """The turn in which the rest of the chain handles this request."""
        raise NotImplementedError


class FilterChain:
    """Runs the filters for a request in order; their response hooks run in reverse order."""

    def __init__(self, filters: Sequence[Filter]) -> None:
        self._filters = tuple(filters)
        by_key: dict[int, list[Filter]] = {}
        for f in self._filters:
            for key in f.api_keys:
                by_key.setdefault(key, []).append(f)
        self._by_key = {key: tuple(fs) for key, fs in by_key.items()}

    def handles(self, api_key: int) -> bool:
        """Whether any filter handles this API key (no filter: the request stays bytes)."""
        return api_key in self._by_key

    def on_request(self, ctx: RequestContext) -> Verdict | Awaitable[Verdict]:
        """The chain's verdict: the first answer or close stops it; hooks compose."""
        return self._run(ctx, self._by_key.get(ctx.api_key, ()), ctx.frame, [])

    def on_close(self, connection_id: int) -> None:
        """Tell every filter that a connection has closed."""
        for f in self._filters:
            f.on_close(connection_id)

    def _run(
        self,
        ctx: RequestContext,
        filters: Sequence[Filter],
        original: bytes,
        hooks: list[ResponseHook],
    ) -> Verdict | Awaitable[Verdict]:
        for i, f in enumerate(filters):
            try:
                verdict = f.on_request(ctx)
            except Exception as exc:
                return _refusal(exc)
            if not isinstance(verdict, VERDICT_TYPES):
                return self._resume(ctx, f, filters[i + 1 :], original, hooks, pending=verdict)
            step = _absorb(ctx, verdict, hooks)
            if not isinstance(step, RequestContext):
                return step
            ctx = step
            if isinstance(f, GateFilter):
                return self._in_turn(f, ctx, filters[i + 1 :], original, hooks)
        hook = compose(hooks)
        return Forward(hook) if ctx.frame is original else ForwardModified(ctx.frame, hook)

    async def _resume(
        self,
        ctx: RequestContext,
        current: Filter,
        rest: Sequence[Filter],
        original: bytes,
        hooks: list[ResponseHook],
        *,
        pending: Awaitable[Verdict],
    ) -> Verdict:
        try:
            verdict = await pending
        except Exception as exc:
            return _refusal(exc)
        step = _absorb(ctx, verdict, hooks)
        if not isinstance(step, RequestContext):
            return step
        result: Verdict | Awaitable[Verdict]
        if isinstance(current, GateFilter):
            result = self._in_turn(current, step, rest, original, hooks)
        else:
            result = self._run(step, rest, original, hooks)
        return await result if inspect.isawaitable(result) else result

    async def _in_turn(
        self,
        gate: GateFilter,
        ctx: RequestContext,
        rest: Sequence[Filter],
        original: bytes,
        hooks: list[ResponseHook],
    ) -> Verdict:
        try:
            async with gate.turn(ctx):
                result = self._run(ctx, rest, original, hooks)
                return await result if inspect.isawaitable(result) else result
        except Exception as exc:
            return _refusal(exc)


def _absorb(
    ctx: RequestContext, verdict: Verdict, hooks: list[ResponseHook]
) -> RequestContext | Answer | Close:
    """Fold a forwarding verdict into the context and the hooks; an answer or close ends it."""
    if isinstance(verdict, Answer | Close):
        return verdict
    if verdict.hook is not None:
        hooks.append(verdict.hook)
    return replace(ctx, frame=verdict.frame) if isinstance(verdict, ForwardModified) else ctx


def compose(hooks: Sequence[ResponseHook]) -> ResponseHook | None:
    """One hook from many: the last filter's hook sees the broker's response first."""
    if len(hooks) <= 1:
        return hooks[0] if hooks else None
    ordered = tuple(reversed(hooks))

    def run(body: bytes) -> HookResult | Awaitable[HookResult]:
        return _apply(ordered, body, None)

    return run


def _apply(
    hooks: Sequence[ResponseHook], body: bytes, principal: str | None
) -> HookResult | Awaitable[HookResult]:
    for i, hook in enumerate(hooks):
        result = hook(body)
        if not isinstance(result, bytes | WithPrincipal):
            return _apply_later(hooks[i + 1 :], result, principal)
        body, principal = _unpack(result, principal)
    return body if principal is None else WithPrincipal(body, principal)


async def _apply_later(
    hooks: Sequence[ResponseHook], pending: Awaitable[HookResult], principal: str | None
) -> HookResult:
    body, principal = _unpack(await pending, principal)
    result = _apply(hooks, body, principal)
    return result if isinstance(result, bytes | WithPrincipal) else await result


def _unpack(result: HookResult, principal: str | None) -> tuple[bytes, str | None]:
    if isinstance(result, WithPrincipal):
        return result.body, result.principal
    return result, principal


def _refusal(exc: Exception) -> Close:
    # A request the proxy cannot handle never reaches the broker, and never hangs.
    if isinstance(exc, CodecError):
        return Close("cannot decode request", str(exc))
    log.exception("request handling failed")
    return Close("internal error", f"{type(exc).__name__}: {exc}")
