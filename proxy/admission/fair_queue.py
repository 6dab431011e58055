"""Weighted fair queuing of guarded work (sans-IO): who is judged next, and how many at once.

Start-time fair queuing with finish-tag order: a request of cost c from flow f starts, in
virtual time, at S = max(V, the finish tag of f's previous request) and finishes at F = S + c,
where V is the start tag of the request that started last. The waiting request with the
smallest F starts next (ties in arrival order). So a flow pays for its own entries: a
single-entry request from a flow with nothing in progress is tagged V + 1, while every
waiting request is tagged at least V + 1 (the one that started last had the smallest tag,
V + its cost) and a batch that arrives later at least V + its size. So the 5,000-entry
batches queued, whichever flow sent them, start after the single entry: it waits for a free
slot (the work in progress), not for the batches queued.

A request of at most LIGHT entries does not even wait for that: it starts at once while fewer
than `slots` such requests run, beside the batches (so at most 2 x slots run in all); only
when that lane is full does it queue, with the tag above.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from dataclasses import dataclass

LIGHT = 10  # entries: a request this small costs the judge about as much as its I/O


@dataclass(eq=False, slots=True)
class Ticket:
    """One request's place in the queue: waiting, then running, then done."""

    flow: Hashable
    start: int
    finish: int
    seq: int
    state: str = "waiting"  # waiting | running | done
    light: bool = False  # runs in the lane of small requests, beside the slots


class FairQueue:
    """Runs at most `slots` requests at once; the others wait in order of their finish tags."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError("slots must be at least 1")
        self._slots = slots
        self._running = 0
        self._light_running = 0
        self._waiting = 0
        self._clock = 0  # V: the start tag of the request that started last
        self._seq = 0
        self._heap: list[tuple[int, int, Ticket]] = []
        self._dead = 0  # heap entries whose ticket gave up waiting
        # Per flow with work waiting or running: its last finish tag, and how many requests.
        # A flow with nothing left is forgotten: memory is bounded by the requests present.
        self._last: dict[Hashable, int] = {}
        self._present: dict[Hashable, int] = {}

    @property
    def waiting(self) -> int:
        """Requests waiting for a slot."""
        return self._waiting

    @property
    def running(self) -> int:
        """Requests in progress, in the slots and in the lane of small requests."""
        return self._running + self._light_running

    def arrive(self, flow: Hashable, cost: int) -> Ticket:
        """Queue a request; its ticket is running at once if a slot is free and nothing waits."""
        start = max(self._clock, self._last.get(flow, 0))
        self._seq += 1
        ticket = Ticket(flow, start, start + max(1, cost), self._seq)
        self._last[flow] = ticket.finish
        self._present[flow] = self._present.get(flow, 0) + 1
        if self._running < self._slots and not self._waiting:
            self._start(ticket)
        elif cost <= LIGHT and self._light_running < self._slots:
            ticket.state, ticket.light = "running", True
            self._light_running += 1
            self._clock = max(self._clock, ticket.start)
        else:
            self._waiting += 1
            heapq.heappush(self._heap, (ticket.finish, ticket.seq, ticket))
        return ticket

    def leave(self, ticket: Ticket) -> list[Ticket]:
        """A request is done, or gave up waiting; returns the tickets that start now."""
        if ticket.state == "done":
            return []
        if ticket.light and ticket.state == "running":
            self._light_running -= 1
        elif ticket.state == "running":
            self._running -= 1
        else:
            self._waiting -= 1
            self._dead += 1  # its heap entry is dropped when it surfaces, or by _compact
        ticket.state = "done"
        self._forget(ticket.flow)
        started = []
        while self._running < self._slots and self._heap:
            _, _, head = heapq.heappop(self._heap)
            if head.state != "waiting":
                self._dead -= 1
                continue
            self._waiting -= 1
            self._start(head)
            started.append(head)
        if self._dead > 16 and self._dead > len(self._heap) // 2:
            self._compact()
        return started

    def _start(self, ticket: Ticket) -> None:
        ticket.state = "running"
        self._running += 1
        self._clock = max(self._clock, ticket.start)

    def _forget(self, flow: Hashable) -> None:
        left = self._present[flow] - 1
        if left:
            self._present[flow] = left
        else:
            del self._present[flow]
            del self._last[flow]

    def _compact(self) -> None:
        # Tickets abandoned while waiting (closed connections) must not pile up in the heap.
        self._heap = [entry for entry in self._heap if entry[2].state == "waiting"]
        heapq.heapify(self._heap)
        self._dead = 0
