"""A gate filter's turn: the filters after it do all their work inside it, and only then."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from kafka_policy_proxy.proxy.filters.api import (
    Answer,
    Close,
    Filter,
    Forward,
    ForwardModified,
    RequestContext,
    Verdict,
)
from kafka_policy_proxy.proxy.filters.chain import FilterChain, GateFilter
from tests.unit.proxy.contexts import context, settle

CREATE_TOPICS = 19


class Gate(GateFilter):
    api_keys = frozenset({CREATE_TOPICS})

    def __init__(self, log: list[str], verdict: Verdict | None = None, later: bool = False) -> None:
        self._log = log
        self._verdict = verdict or Forward()
        self._later = later
        self.inside = False

    def on_request(self, ctx: RequestContext) -> Verdict | Awaitable[Verdict]:
        self._log.append("gate")
        return self._async() if self._later else self._verdict

    async def _async(self) -> Verdict:
        return self._verdict

    def turn(self, ctx: RequestContext) -> AbstractAsyncContextManager[None]:
        return self._turn()

    @asynccontextmanager
    async def _turn(self) -> AsyncIterator[None]:
        self._log.append("turn begins")
        self.inside = True
        try:
            yield
        finally:
            self.inside = False
            self._log.append("turn ends")


class Judge(Filter):
    """Records whether its work, until its verdict is ready, happened inside the gate's turn."""

    api_keys = frozenset({CREATE_TOPICS})

    def __init__(self, gate: Gate, log: list[str], fail: bool = False) -> None:
        self._gate = gate
        self._log = log
        self._fail = fail

    def on_request(self, ctx: RequestContext) -> Awaitable[Verdict]:
        return self._judge(ctx)

    async def _judge(self, ctx: RequestContext) -> Verdict:
        self._log.append(f"judge starts inside={self._gate.inside}")
        if self._fail:
            raise RuntimeError("judge failed")
        self._log.append(f"judge ends inside={self._gate.inside}")
        return ForwardModified(ctx.frame + b"J")


async def test_the_filters_after_the_gate_run_inside_its_turn() -> None:
    log: list[str] = []
    gate = Gate(log)
    chain = FilterChain([gate, Judge(gate, log)])
    ctx = context(CREATE_TOPICS, 7)
    verdict: Any = await settle(chain.on_request(ctx))
    assert verdict == ForwardModified(ctx.frame + b"J")
    assert log == [
        "gate",
        "turn begins",
        "judge starts inside=True",
        "judge ends inside=True",
        "turn ends",
    ]


async def test_a_gate_that_decides_later_still_opens_the_turn() -> None:
    log: list[str] = []
    gate = Gate(log, later=True)
    chain = FilterChain([gate, Judge(gate, log)])
    await settle(chain.on_request(context(CREATE_TOPICS, 7)))
    assert log[1:3] == ["turn begins", "judge starts inside=True"]


async def test_a_gate_that_answers_stops_the_chain_without_a_turn() -> None:
    log: list[str] = []
    gate = Gate(log, Answer(b"throttled"), later=True)
    chain = FilterChain([gate, Judge(gate, log)])
    assert await settle(chain.on_request(context(CREATE_TOPICS, 7))) == Answer(b"throttled")
    assert log == ["gate"]


async def test_a_failure_inside_the_turn_closes_and_ends_the_turn() -> None:
    log: list[str] = []
    gate = Gate(log)
    chain = FilterChain([gate, Judge(gate, log, fail=True)])
    verdict = await settle(chain.on_request(context(CREATE_TOPICS, 7)))
    assert verdict == Close("internal error", "RuntimeError: judge failed")
    assert log[-1] == "turn ends"
