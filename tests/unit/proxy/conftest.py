"""Run the proxy's async tests under both event loops the proxy can use."""

import asyncio

import pytest
import uvloop


@pytest.fixture(params=["asyncio", "uvloop"], scope="session")
def event_loop_policy(request: pytest.FixtureRequest) -> asyncio.AbstractEventLoopPolicy:
    """The proxy runs on uvloop where available; its transports behave differently."""
    if request.param == "uvloop":
        return uvloop.EventLoopPolicy()
    return asyncio.DefaultEventLoopPolicy()
