"""A per-principal rate of guarded entries (sans-IO), as the broker's controller mutation
quota (KIP-599) counts them: a token bucket per flow that may go into debt.

A request is admitted while its flow's bucket is not in debt, and takes its whole cost, so
one batch larger than the burst still passes once; then the flow waits until the refill has
paid the debt back: that wait is the throttle time the client is told, or is made to wait.
"""

from __future__ import annotations

from collections.abc import Hashable


class RateLimits:
    """Token buckets of `rate` entries a second, holding at most `burst`, one per flow."""

    def __init__(self, rate: float, burst: float) -> None:
        if rate <= 0 or burst <= 0:
            raise ValueError("rate and burst must be positive")
        self._rate = rate
        self._burst = burst
        self._buckets: dict[Hashable, tuple[float, float]] = {}  # flow -> (tokens, when)
        self._swept_at_size = 64

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, flow: Hashable, cost: int, now: float) -> float:
        """Admit `cost` entries (0.0) or say how many seconds the flow must wait (nothing taken)."""
        tokens = self._tokens(flow, now)
        if tokens < 0:
            self._buckets[flow] = (tokens, now)
            return -tokens / self._rate
        self._buckets[flow] = (tokens - cost, now)
        if len(self._buckets) > self._swept_at_size:
            self._sweep(now)
        return 0.0

    def forget(self, flow: Hashable) -> None:
        """Drop a flow's bucket (its connection has closed)."""
        self._buckets.pop(flow, None)

    def _tokens(self, flow: Hashable, now: float) -> float:
        held = self._buckets.get(flow)
        if held is None:
            return self._burst
        tokens, when = held
        return min(self._burst, tokens + (now - when) * self._rate)

    def _sweep(self, now: float) -> None:
        # A full bucket is the same as none: forgetting it bounds memory by the active flows.
        self._buckets = {
            flow: held
            for flow, held in self._buckets.items()
            if self._tokens(flow, now) < self._burst
        }
        self._swept_at_size = max(64, 2 * len(self._buckets))
