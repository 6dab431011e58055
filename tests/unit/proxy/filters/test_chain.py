"""The filter chain: filters in order, only for their API keys; hooks in reverse order."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from kafka_policy_proxy.codec.errors import CodecError
from kafka_policy_proxy.proxy.filters.api import (
    Answer,
    Close,
    Filter,
    Forward,
    ForwardModified,
    HookResult,
    RequestContext,
    Verdict,
    WithPrincipal,
)
from kafka_policy_proxy.proxy.filters.chain import FilterChain
from tests.unit.proxy.contexts import context, settle

METADATA, LIST_OFFSETS = 3, 2


class Step(Filter):
    """Appends a mark to the frame it is offered and to the response it sees."""

    api_keys = frozenset({METADATA})

    def __init__(self, mark: bytes, log: list[str], *, later: bool = False) -> None:
        self._mark = mark
        self._log = log
        self._later = later

    def on_request(self, ctx: RequestContext) -> Verdict | Awaitable[Verdict]:
        self._log.append(f"request {self._mark.decode()}")
        verdict = ForwardModified(ctx.frame + self._mark, self._hook)
        return self._async(verdict) if self._later else verdict

    async def _async(self, verdict: Verdict) -> Verdict:
        return verdict

    def _hook(self, body: bytes) -> HookResult:
        self._log.append(f"response {self._mark.decode()}")
        return body + self._mark


class Stops(Filter):
    api_keys = frozenset({METADATA})

    def __init__(self, verdict: Verdict) -> None:
        self._verdict = verdict

    def on_request(self, ctx: RequestContext) -> Verdict:
        return self._verdict


class Raises(Filter):
    api_keys = frozenset({METADATA})

    def __init__(self, exc: Exception) -> None:
        self._exc = exc

    def on_request(self, ctx: RequestContext) -> Verdict:
        raise self._exc


async def test_filters_run_in_order_and_their_hooks_in_reverse() -> None:
    log: list[str] = []
    chain = FilterChain([Step(b"A", log), Step(b"B", log, later=True), Step(b"C", log)])
    ctx = context(METADATA, 12)
    verdict: Any = await settle(chain.on_request(ctx))
    assert isinstance(verdict, ForwardModified) and verdict.hook is not None
    assert verdict.frame == ctx.frame + b"ABC"
    assert await settle(verdict.hook(b"")) == b"CBA"
    assert log == ["request A", "request B", "request C", "response C", "response B", "response A"]


def test_a_request_no_filter_handles_is_never_offered() -> None:
    log: list[str] = []
    chain = FilterChain([Step(b"A", log)])
    assert not chain.handles(LIST_OFFSETS)
    assert chain.handles(METADATA)


def test_an_answer_stops_the_chain() -> None:
    log: list[str] = []
    chain = FilterChain([Stops(Answer(b"no")), Step(b"A", log)])
    assert chain.on_request(context(METADATA, 12)) == Answer(b"no")
    assert log == []


def test_an_unchanged_frame_is_forwarded_as_is() -> None:
    chain = FilterChain([Stops(Forward())])
    assert chain.on_request(context(METADATA, 12)) == Forward()


def test_a_filter_that_cannot_decode_closes_the_connection() -> None:
    chain = FilterChain([Raises(CodecError(3, 12, "bad"))])
    verdict = chain.on_request(context(METADATA, 12))
    assert isinstance(verdict, Close) and verdict.reason == "cannot decode request"


def test_a_filter_that_fails_closes_the_connection() -> None:
    chain = FilterChain([Raises(RuntimeError("bug"))])
    assert chain.on_request(context(METADATA, 12)) == Close("internal error", "RuntimeError: bug")


async def test_a_principal_learned_by_an_inner_hook_survives_the_outer_hooks() -> None:
    log: list[str] = []

    class Learns(Filter):
        api_keys = frozenset({METADATA})

        def on_request(self, ctx: RequestContext) -> Verdict:
            return Forward(lambda body: WithPrincipal(body, "User:alice"))

    chain = FilterChain([Step(b"A", log), Learns()])
    verdict: Any = chain.on_request(context(METADATA, 12))
    assert await settle(verdict.hook(b"")) == WithPrincipal(b"A", "User:alice")


def test_every_filter_hears_of_a_closed_connection() -> None:
    closed: list[tuple[str, int]] = []

    class Tracks(Filter):
        def __init__(self, name: str) -> None:
            self._name = name

        def on_close(self, connection_id: int) -> None:
            closed.append((self._name, connection_id))

    FilterChain([Tracks("a"), Tracks("b")]).on_close(5)
    assert closed == [("a", 5), ("b", 5)]
