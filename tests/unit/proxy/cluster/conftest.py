"""Fake brokers for the cluster-state reader's tests, started per test and closed after it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.unit.proxy.cluster.fake_broker import FakeBroker, Script


@pytest.fixture
async def brokers() -> AsyncIterator[Callable[..., Any]]:
    """Start fake brokers; all are closed at the end."""
    started: list[FakeBroker] = []

    async def start(script: Script, **options: Any) -> FakeBroker:
        broker = FakeBroker(script, **options)
        await broker.start()
        started.append(broker)
        return broker

    yield start
    for broker in started:
        assert broker.server is not None
        broker.server.close()
