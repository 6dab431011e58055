"""Admission filter: each principal's rate of guarded entries and its audit budget, then a
fair turn for the rest of the chain.

Guarded work is what the topic policy and admin API filters judge. Its flow is the principal,
or the connection for User:ANONYMOUS (unauthenticated connections do not share a queue with
an attacker). Over the rate (admission.entries_per_second, as the broker's controller
mutation quota, KIP-599): where the version has THROTTLING_QUOTA_EXCEEDED (CreateTopics v6+,
CreatePartitions v3+, DeleteTopics v5+), every entry is answered with it and throttle_time_ms
says when the bucket allows the request (the Java AdminClient retries then); otherwise the
request waits that long before its turn, as a broker throttles older clients. A principal
whose audit budget is spent is refused, every entry POLICY_VIOLATION, with no audit record.
Answers that need the request decoded are built inside a turn: they cost judge time too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import time
from collections.abc import Awaitable, Callable, Hashable
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from kio.schema.errors import ErrorCode

from kafka_policy_proxy.codec.admin_denials import denial_response
from kafka_policy_proxy.codec.api_classes import CLUSTER_MUTATIONS
from kafka_policy_proxy.codec.entry_counts import top_level_count
from kafka_policy_proxy.codec.errors import CodecError, api_name
from kafka_policy_proxy.codec.guarded import GUARDED_API_KEYS, Denial, guarded_api
from kafka_policy_proxy.codec.registry import encode, request_class
from kafka_policy_proxy.proxy.admission.fair_turns import FairTurns
from kafka_policy_proxy.proxy.admission.rate_limit import RateLimits
from kafka_policy_proxy.proxy.filters.api import Answer, Close, Forward, RequestContext, Verdict
from kafka_policy_proxy.proxy.filters.chain import GateFilter
from kafka_policy_proxy.proxy.metrics import ADMISSION_THROTTLED

ANONYMOUS = "User:ANONYMOUS"
# The first version of each API whose answer carries THROTTLING_QUOTA_EXCEEDED (KIP-599).
THROTTLE_ERROR_SINCE = {19: 6, 37: 3, 20: 5}  # CreateTopics, CreatePartitions, DeleteTopics
BUDGET_KEY = "audit.principal_budget_bytes_per_minute"


class AuditBudget(Protocol):
    """What admission asks of the audit budget (proxy/audit/budget.py)."""

    def allows(self, principal: str, client_address: str = "") -> bool:
        """False once the principal (User:ANONYMOUS: its client host) has spent its audit
        budget in the current window."""
        ...


def entries_of(ctx: RequestContext) -> int:
    """What a request costs: its topics or resources, read without decoding; 1 for an admin
    API call, or for a request whose count cannot be read (the filters after refuse it)."""
    if ctx.api_key not in GUARDED_API_KEYS:
        return 1
    try:
        cls = request_class(ctx.api_key, ctx.api_version)
        return max(1, top_level_count(cls, ctx.frame, ctx.body_offset()))
    except CodecError:
        return 1


def flow_of(ctx: RequestContext) -> Hashable:
    """Whose share a request counts against: its principal, or its connection if anonymous."""
    return ("connection", ctx.connection_id) if ctx.principal == ANONYMOUS else ctx.principal


class AdmissionFilter(GateFilter):
    """Throttles a principal over its rate, refuses one over its audit budget, grants turns."""

    api_keys = GUARDED_API_KEYS | CLUSTER_MUTATIONS

    def __init__(
        self,
        *,
        concurrent: int,
        entries_per_second: float,
        burst: int,
        entries: Callable[[RequestContext], int] | None = None,
        legacy_error_code: int = -1,
        budget: AuditBudget | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.turns = FairTurns(concurrent)
        self._limits = RateLimits(entries_per_second, burst)
        self._entries = entries or entries_of
        self._legacy_error_code = legacy_error_code
        self._budget = budget
        self._clock = clock
        self._sleep = sleep

    def on_request(self, ctx: RequestContext) -> Verdict | Awaitable[Verdict]:
        """Forward (into a turn) if the principal is within its rate and audit budget."""
        if self._budget is not None and not self._budget.allows(ctx.principal, ctx.client_address):
            ADMISSION_THROTTLED.labels(api=api_name(ctx.api_key), reason="audit_budget").inc()
            message = f"audit budget for {ctx.principal} exhausted ({BUDGET_KEY}); retry later"
            return self._answer_in_turn(ctx, message, None, 0)
        cost = self._entries(ctx)
        wait = self._limits.take(flow_of(ctx), cost, self._clock())
        if wait == 0:
            return Forward()
        ADMISSION_THROTTLED.labels(api=api_name(ctx.api_key), reason="rate").inc()
        since = THROTTLE_ERROR_SINCE.get(ctx.api_key)
        if since is not None and ctx.api_version >= since:
            message = f"{ctx.principal} is over admission.entries_per_second; retry later"
            throttle_ms = max(1, round(wait * 1000))
            return self._answer_in_turn(
                ctx, message, ErrorCode.throttling_quota_exceeded, throttle_ms
            )
        return self._delayed(ctx, cost, wait)

    def turn(self, ctx: RequestContext) -> AbstractAsyncContextManager[None]:
        """The fair turn in which the topic policy (or admin API) filter handles the request."""
        return self.turns.turn(flow_of(ctx), self._entries(ctx))

    def on_close(self, connection_id: int) -> None:
        """An anonymous connection's bucket goes with it."""
        self._limits.forget(("connection", connection_id))

    async def _delayed(self, ctx: RequestContext, cost: int, wait: float) -> Verdict:
        # Outside any turn: a throttled client holds no judging slot while it waits. The wait
        # is the flow's debt over its rate; only its own connections (one request each) add.
        while wait > 0:
            await self._sleep(wait)
            wait = self._limits.take(flow_of(ctx), cost, self._clock())
        return Forward()

    async def _answer_in_turn(
        self, ctx: RequestContext, message: str, error: ErrorCode | None, throttle_ms: int
    ) -> Verdict:
        async with self.turn(ctx):
            return every_entry_answered(ctx, message, error, throttle_ms, self._legacy_error_code)


def every_entry_answered(
    ctx: RequestContext,
    message: str,
    error: ErrorCode | None,
    throttle_ms: int,
    legacy_error_code: int = -1,
) -> Verdict:
    """An answer giving every entry `error` (None: POLICY_VIOLATION), with throttle_time_ms."""
    body = ctx.frame[ctx.body_offset() :]
    api = guarded_api(ctx.api_key)
    if api is None:
        # An admin API: denied as admin_apis denies it, or closed where no answer fits.
        answer = denial_response(ctx.api_key, ctx.api_version, body, message)
        return Close("admission refused", message) if answer is None else Answer(answer)
    request = api.decode_request(ctx.api_version, body)
    entries = len(api.entries(request))
    if not entries:
        return Forward()  # nothing to judge, nothing to answer for: the broker answers it
    denial = Denial(message, error)
    plan = api.split(request, dict.fromkeys(range(entries), denial), legacy_error_code)
    merged = api.merge(plan, None)
    if not throttle_ms:
        return Answer(merged)
    response = api.decode_response(ctx.api_version, merged)
    throttle = datetime.timedelta(milliseconds=throttle_ms)
    return Answer(encode(dataclasses.replace(response, throttle_time=throttle)))
