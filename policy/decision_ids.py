"""Decision ids: UUID version 7 (RFC 9562), so that they sort by the time they were minted.

An id is 48 bits of Unix time in milliseconds, the version (7), a 42-bit counter, the variant
and 32 random bits, written as canonical UUID text: 36 characters, lower-case hex and hyphens,
`0193a5c2-7f1e-7b3a-9c4d-2e8f1a6b3c5d`. The counter is seeded at random in each new
millisecond and counts up within it (RFC 9562 section 6.2, method 1, as CPython 3.14's
`uuid.uuid7` does), so:

- the ids one process mints sort, as text, in the order it minted them, even when the clock
  steps back (the last millisecond is kept until the clock passes it);
- ids minted by different processes (workers, proxies) sort by their millisecond; within one
  millisecond their order is arbitrary;
- ids are unique: a process never repeats its counter within a millisecond, and another
  process's differ in 73 random bits (a forked worker reseeds).

`decision_time(id)` reads the millisecond back: the audit lake is scanned by it
(`kafka-policy-proxy audit show`). The records of schema 2 written before ids were time-ordered
carry a version-4 id as 32 hex digits: `parse_decision_id` reads those too.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from datetime import UTC, datetime

_COUNTER_BITS = 42
_MAX_COUNTER = (1 << _COUNTER_BITS) - 1
_TAIL_BITS = 32
_VERSION = 7
_VARIANT = 0b10


class _Clock:
    """The last millisecond used and the counter within it (one per process)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.last_ms = -1
        self.counter = 0

    def reset(self) -> None:
        """Forget the parent's state in a forked child: its ids must not follow the parent's."""
        self.lock = threading.Lock()
        self.last_ms = -1


_clock = _Clock()


def _reset_in_child() -> None:
    _clock.reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_in_child)


def new_decision_id() -> str:
    """A fresh, unique decision id: a UUIDv7 in canonical text, later than every earlier one
    minted by this process."""
    noise = int.from_bytes(os.urandom(10))
    tail = noise & 0xFFFFFFFF
    with _clock.lock:
        ms = time.time_ns() // 1_000_000
        if ms > _clock.last_ms:
            # Seeded below the top bit: at least 2**41 ids fit in one millisecond.
            counter = (noise >> _TAIL_BITS) & (_MAX_COUNTER >> 1)
        else:
            ms = _clock.last_ms  # the same millisecond, or the clock stepped back
            counter = _clock.counter + 1
            if counter > _MAX_COUNTER:
                ms, counter = ms + 1, 0
        _clock.last_ms, _clock.counter = ms, counter
    return decision_id_at(ms, counter, tail)


def decision_id_at(ms: int, counter: int, tail: int) -> str:
    """The UUIDv7 text of Unix millisecond `ms`, a 42-bit `counter` and 32 random bits `tail`:
    `new_decision_id` mints them now; a generator of past records stamps its own times."""
    value = (
        (ms & 0xFFFF_FFFF_FFFF) << 80
        | _VERSION << 76
        | (counter >> 30 & 0xFFF) << 64
        | _VARIANT << 62
        | (counter & 0x3FFF_FFFF) << _TAIL_BITS
        | tail & 0xFFFF_FFFF
    )
    text = f"{value:032x}"
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def parse_decision_id(text: str) -> uuid.UUID:
    """The UUID a decision id names: canonical text or 32 hex digits, either case; raises
    ValueError for anything else."""
    stripped = text.strip()
    if len(stripped) not in (32, 36):
        raise ValueError(f"{text!r} is not a decision id (a UUID: 36 or 32 characters)")
    return uuid.UUID(stripped)


def is_time_ordered(decision_id: uuid.UUID) -> bool:
    """Whether the id is a UUIDv7, which carries its time (older records' ids are v4)."""
    return decision_id.version == _VERSION and decision_id.variant == uuid.RFC_4122


def decision_time(decision_id: str | uuid.UUID) -> datetime:
    """When a UUIDv7 decision id was minted, to the millisecond (UTC); raises ValueError for
    an id that carries no time."""
    parsed = decision_id if isinstance(decision_id, uuid.UUID) else parse_decision_id(decision_id)
    if not is_time_ordered(parsed):
        raise ValueError(f"{decision_id} is not a UUIDv7: it carries no time")
    return datetime.fromtimestamp((parsed.int >> 80) / 1000, UTC)


def cite(message: str, decision_id: str) -> str:
    """A denial message as the client sees it: ending with the decision id to quote."""
    return f"{message} (decision {decision_id})"
