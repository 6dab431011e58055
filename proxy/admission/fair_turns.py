"""Fair turns for asyncio: the thin wrapper that lets a coroutine wait for its FairQueue slot."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager

from kafka_policy_proxy.proxy.admission.fair_queue import FairQueue, Ticket
from kafka_policy_proxy.proxy.metrics import ADMISSION_QUEUE_DEPTH, ADMISSION_TURN_WAIT


class FairTurns:
    """At most `slots` guarded requests are worked on at once, taken in fair order."""

    def __init__(self, slots: int) -> None:
        self._queue = FairQueue(slots)
        self._wakers: dict[Ticket, asyncio.Future[None]] = {}

    @property
    def waiting(self) -> int:
        """Requests waiting for their turn."""
        return self._queue.waiting

    @asynccontextmanager
    async def turn(self, flow: Hashable, cost: int) -> AsyncIterator[None]:
        """Wait for this flow's turn for work of `cost` entries; hold a slot until the exit."""
        began = time.monotonic()
        ticket = self._queue.arrive(flow, cost)
        try:
            if ticket.state == "waiting":
                ADMISSION_QUEUE_DEPTH.set(self._queue.waiting)
                waker = self._wakers[ticket] = asyncio.get_running_loop().create_future()
                await waker
            ADMISSION_TURN_WAIT.observe(time.monotonic() - began)
            yield
        finally:
            # Done, failed or cancelled (a closed connection): the slot or the place goes.
            self._wakers.pop(ticket, None)
            for started in self._queue.leave(ticket):
                waker = self._wakers.pop(started)
                if not waker.done():
                    waker.set_result(None)
            ADMISSION_QUEUE_DEPTH.set(self._queue.waiting)
