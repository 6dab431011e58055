"""Fair turns under asyncio: a bounded number in progress, fair order, cancellation frees."""

from __future__ import annotations

import asyncio

import pytest

from kafka_policy_proxy.proxy.admission.fair_turns import FairTurns


async def test_turns_bound_the_work_in_progress_and_serve_the_light_flow_first() -> None:
    turns = FairTurns(1)
    order: list[str] = []
    in_progress = 0
    most = 0
    release = asyncio.Event()

    async def work(flow: str, cost: int, hold: bool = False) -> None:
        nonlocal in_progress, most
        async with turns.turn(flow, cost):
            in_progress += 1
            most = max(most, in_progress)
            order.append(flow)
            if hold:
                await release.wait()
            await asyncio.sleep(0)
            in_progress -= 1

    first = asyncio.create_task(work("heavy-0", 5000, hold=True))
    await asyncio.sleep(0)
    tasks = [asyncio.create_task(work(f"heavy-{i}", 5000)) for i in range(1, 6)]
    await asyncio.sleep(0)
    tasks.append(asyncio.create_task(work("canary", 50)))  # a small batch: it queues
    await asyncio.sleep(0)
    assert turns.waiting == 6
    release.set()
    await asyncio.gather(first, *tasks)
    assert most == 1
    assert order[:2] == ["heavy-0", "canary"]


async def test_a_cancelled_waiter_gives_its_place_up() -> None:
    turns = FairTurns(1)
    release = asyncio.Event()
    done: list[str] = []

    async def work(flow: str) -> None:
        async with turns.turn(flow, 50):  # over the lane of small requests
            await release.wait()
            done.append(flow)

    holder = asyncio.create_task(work("a"))
    await asyncio.sleep(0)
    gone = asyncio.create_task(work("b"))
    after = asyncio.create_task(work("c"))
    await asyncio.sleep(0)
    gone.cancel()
    await asyncio.sleep(0)
    assert turns.waiting == 1
    release.set()
    await asyncio.gather(holder, after)
    assert done == ["a", "c"]
    assert turns.waiting == 0


async def test_a_failure_in_the_turn_frees_the_slot() -> None:
    turns = FairTurns(1)

    async def fails() -> None:
        async with turns.turn("a", 1):
            raise RuntimeError("judge failed")

    with pytest.raises(RuntimeError):
        await fails()
    async with asyncio.timeout(1):
        async with turns.turn("b", 1):
            pass
