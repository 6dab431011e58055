"""The per-principal audit budget: bytes of audit records per minute, beyond which the proxy
refuses the principal's guarded requests instead of letting it overwrite the trail.

Counted per principal; an unauthenticated client (User:ANONYMOUS) is counted per client host,
so that one anonymous flooder does not lock every anonymous client out (asked without the
client's address, ANONYMOUS is judged on all its hosts together: the safe side). Fixed one-minute
windows: a principal may write up to twice the budget across a window boundary. At most
`max_principals` are tracked (least recently charged forgotten first), so memory is bounded.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from kafka_policy_proxy.proxy.metrics import AUDIT_BUDGET_DENIALS

ANONYMOUS = "User:ANONYMOUS"
WINDOW_S = 60.0


def budget_key(principal: str, client_address: str = "") -> str:
    """Whose budget a request spends: the principal, or for ANONYMOUS the client's host."""
    if principal != ANONYMOUS or not client_address:
        return principal
    host = client_address.rsplit(":", 1)[0] if ":" in client_address else client_address
    return f"{ANONYMOUS}@{host}"


class AuditBudget:
    """Bytes of audit records per principal per minute; `allows` is False once spent."""

    def __init__(
        self,
        bytes_per_minute: int,
        *,
        max_principals: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`bytes_per_minute` 0: unlimited (every principal allowed, nothing tracked)."""
        self._limit = bytes_per_minute
        self._max = max_principals
        self._clock = clock
        # principal key -> (start of its current window, bytes charged in it)
        self._spent: OrderedDict[str, tuple[float, int]] = OrderedDict()

    def allows(self, principal: str, client_address: str = "") -> bool:
        """Whether the principal may still make guarded requests (counts a refusal)."""
        if self._limit <= 0:
            return True
        if self._current(budget_key(principal, client_address)) < self._limit:
            return True
        AUDIT_BUDGET_DENIALS.inc()
        return False

    def charge(self, principal: str, nbytes: int, client_address: str = "") -> None:
        """Count `nbytes` of audit records written for the principal."""
        if self._limit <= 0:
            return
        key = budget_key(principal, client_address)
        self._add(key, nbytes)
        if key != principal:
            self._add(principal, nbytes)  # ANONYMOUS on all hosts together, too

    def _add(self, key: str, nbytes: int) -> None:
        now = self._clock()
        start, spent = self._spent.pop(key, (now, 0))
        if now - start >= WINDOW_S:
            start, spent = now, 0
        self._spent[key] = (start, spent + nbytes)  # most recently charged last
        while len(self._spent) > self._max:
            self._spent.popitem(last=False)

    def __len__(self) -> int:
        return len(self._spent)

    def _current(self, key: str) -> int:
        entry = self._spent.get(key)
        if entry is None or self._clock() - entry[0] >= WINDOW_S:
            return 0
        return entry[1]
