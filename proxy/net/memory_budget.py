"""One process-wide budget for the bytes buffered by every client connection.

Each connection charges the budget the change in what it holds (partial and held request
frames, responses queued, socket write buffers): one integer add on the data path. A request
frame that will be buffered whole is charged its declared size as soon as its 4-byte prefix
is read, so a connection stops after one read when the frame does not fit, not once it holds
it (which is what let 200 partial frames hold 9 GiB under a 256 MiB budget, issue 31). When the
budget is reached, the connections holding the most stop reading; those that then make no
progress for `stall_timeout_s` are closed. Reading resumes below the low-water mark.

A connection that holds little (one small request: at most `small`, 1/64 of the limit up to
1 MiB) is not stopped for growing until the reserve above the limit (1/8 of it) is spent too:
otherwise, while attackers hold the budget, every other client's next request would stop its
connection until the stall timeout closed them (issue 31: a canary's creates starved for 30 s).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

import structlog

from kafka_policy_proxy.proxy.metrics import BUFFERED_BYTES, MEMORY_PAUSED

log = structlog.get_logger("proxy.net.memory_budget")

# Reading resumes once usage falls below this share of the limit.
LOW_WATER_FRACTION = 0.75
# Over the limit, small holders may still grow into this share of it above the limit.
RESERVE_FRACTION = 0.125
SMALL_FRACTION = 1 / 64
SMALL_MAX = 1024 * 1024
PAUSE = "memory"
_PAUSED = MEMORY_PAUSED.labels(reason="budget")


class Member(Protocol):
    """A connection under the budget."""

    held: int  # the bytes charged to the budget now

    def pause(self, reason: str) -> None:
        """Stop reading its client."""

    def resume(self, reason: str) -> None:
        """Read its client again."""

    def recount(self) -> None:
        """Charge the budget any change in what it holds."""

    def stalled(self, held: int, stalled_s: float) -> None:
        """Close it: it held `held` bytes without progress for `stalled_s` seconds."""


class MemoryBudget:
    """Bytes buffered across all connections, kept under `limit` (plus a reserve for small
    holders) plus one read per connection."""

    def __init__(
        self, limit: int, stall_timeout_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limit = limit
        self.low_water = int(limit * LOW_WATER_FRACTION)
        self.hard_limit = limit + int(limit * RESERVE_FRACTION)
        self.small = min(SMALL_MAX, int(limit * SMALL_FRACTION))
        self.stall_timeout_s = stall_timeout_s
        self.used = 0
        self._clock = clock
        # For each member: what it held when last seen to change, and since when.
        self._members: dict[Member, tuple[int, float]] = {}
        # The members holding something: only their write buffers can drain unseen, so only
        # they are recounted (10,000 idle connections cost the periodic check nothing).
        self._holding: set[Member] = set()
        self._paused: set[Member] = set()

    @property
    def paused(self) -> int:
        """How many connections are stopped for memory."""
        return len(self._paused)

    def join(self, member: Member) -> None:
        """Start accounting for a connection."""
        self._members[member] = (0, self._clock())

    def leave(self, member: Member) -> None:
        """A connection is gone: release what it held."""
        self._members.pop(member, None)
        if member in self._paused:
            self._paused.discard(member)
            _PAUSED.dec()
        self.charge(member, -member.held)
        member.held = 0
        self._holding.discard(member)

    def charge(self, member: Member, delta: int) -> None:
        """A connection now holds `delta` bytes more (or fewer, if negative)."""
        self.used += delta
        if member.held:
            self._holding.add(member)
        elif member in self._holding:
            self._holding.discard(member)
            if member in self._members:
                # Holding nothing: when it holds again, its stall clock starts afresh.
                self._members[member] = (0, 0.0)
        if delta > 0:
            if self.used >= self.limit:
                self._relieve(member)
        elif self._paused and self.used < self.low_water:
            self._resume_all()

    def check(self) -> None:
        """Recount every connection; under pressure, close the ones that stall (call it often)."""
        now = self._clock()
        for member in list(self._holding):
            member.recount()
        pressure = bool(self._paused) or self.used >= self.limit
        stalled = []
        for member in self._holding:
            entry = self._members.get(member)
            if entry is None:
                continue
            seen, since = entry
            if member.held != seen:
                self._members[member] = (member.held, now)
            elif pressure and now - since >= self.stall_timeout_s:
                stalled.append((member, now - since))
        for member, stalled_s in stalled:
            member.stalled(member.held, stalled_s)
            self.leave(member)
        BUFFERED_BYTES.set(self.used)

    def _relieve(self, growing: Member) -> None:
        # The connection that grew stops, unless it holds little and the reserve is not spent;
        # so do the largest holders, until what they hold would take usage below the low-water
        # mark if they were gone.
        first = not self._paused
        small = growing.held <= self.small and self.used < self.hard_limit
        if growing not in self._paused and not small:
            self._pause(growing)
        if not first:
            return
        excess = self.used - self.low_water
        for member in sorted(self._members, key=lambda m: m.held, reverse=True):
            if excess <= 0 or not member.held:
                break
            if member not in self._paused:
                self._pause(member)
            excess -= member.held
        log.warning(
            "memory budget reached: reading paused",
            used=self.used,
            limit=self.limit,
            paused=len(self._paused),
        )

    def _pause(self, member: Member) -> None:
        self._paused.add(member)
        _PAUSED.inc()
        member.pause(PAUSE)

    def _resume_all(self) -> None:
        paused, self._paused = self._paused, set()
        _PAUSED.dec(len(paused))
        for member in paused:
            member.resume(PAUSE)
        log.info(
            "memory budget below low water: reading resumed", used=self.used, resumed=len(paused)
        )
