"""Broker config changes the proxy forwarded, until the broker it reads from shows them.

A broker applies a change a moment after the controller commits it, and a read before that
would cache the old defaults and topic configs. So after the proxy forwards a broker config
change, every read first waits until the connected broker shows it (one DescribeConfigs per
poll), and fails closed if it does not within the wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from kafka_policy_proxy.codec.topic_view import ConfigResourceItem
from kafka_policy_proxy.policy.config_synonyms import BROKER_TO_TOPIC
from kafka_policy_proxy.policy.configs import split_list
from kafka_policy_proxy.proxy.cluster.broker_defaults import CREATE_DEFAULTS
from kafka_policy_proxy.proxy.cluster.requests import BROKER_RESOURCE

# DescribeConfigs' config_source for a value set on the broker itself.
DYNAMIC_BROKER_CONFIG = 2
# The broker configs the facts are read from: a change to any other one changes no fact.
FACT_KEYS = frozenset(BROKER_TO_TOPIC) | frozenset(CREATE_DEFAULTS)
# How long a read waits for the connected broker to apply a forwarded broker config change
# (metadata reaches every broker within moments), and the pauses between its polls.
APPLIED_WAIT_S = 5.0
APPLIED_POLL_S = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2)

Shown = Callable[[Sequence[ConfigResourceItem]], Awaitable[bool]]


class NotShown(Exception):
    """The connected broker did not show the changes within the wait; they are given up on."""

    def __init__(self, wait_s: float) -> None:
        super().__init__(f"not shown after {wait_s:g} s")
        self.wait_s = wait_s


class UnappliedChanges:
    """The broker config changes the brokers accepted that the connected broker may not show."""

    def __init__(self, wait_s: float = APPLIED_WAIT_S) -> None:
        self._changes: list[ConfigResourceItem] = []
        self._lock = asyncio.Lock()
        self.wait_s = wait_s

    def __bool__(self) -> bool:
        return bool(self._changes)

    def add(self, changes: Iterable[ConfigResourceItem]) -> None:
        """Wait for these from the next read on (only broker resources are waited for)."""
        self._changes.extend(c for c in changes if c.resource_type == BROKER_RESOURCE)

    async def wait(self, shown: Shown) -> bool:
        """Poll `shown` until the connected broker shows the changes; whether there were any
        (what was read meanwhile holds the old values). Raises NotShown after the wait."""
        async with self._lock:
            changes = list(self._changes)
            if not changes:
                return False  # another read waited for them
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.wait_s
            pauses = iter(APPLIED_POLL_S)
            # A failed read raises and leaves the changes awaited by the next read.
            while not await shown(changes):
                if loop.time() >= deadline:
                    del self._changes[: len(changes)]
                    raise NotShown(self.wait_s)
                await asyncio.sleep(next(pauses, APPLIED_POLL_S[-1]))
            del self._changes[: len(changes)]
            return True


def shown_by(response: Any, changes: Sequence[ConfigResourceItem]) -> bool:
    """Whether a DescribeConfigs answer for the changes' broker resources shows every change
    that reaches the facts."""
    seen: dict[str, dict[str, str | None]] = {}
    for result in response.results:
        if result.error_code is not ErrorCode.none:
            continue  # another broker's own configs: not what this connection reads
        # The cluster default's configs are all its own; a broker's, those set on it.
        seen[result.resource_name] = {
            c.name: c.value
            for c in result.configs
            if not result.resource_name or c.config_source == DYNAMIC_BROKER_CONFIG
        }
    return all(shows(seen[c.name], c) for c in changes if c.name in seen)


def shows(dynamic: Mapping[str, str | None], change: ConfigResourceItem) -> bool:
    """Whether a resource's dynamic configs show the change (the keys facts are read from)."""
    for key, op, value in change.ops:
        if key not in FACT_KEYS:
            continue
        current = dynamic.get(key)
        if op == "SET" and value is not None:
            done = current is not None and current.strip() == value.strip()
        elif op in ("SET", "DELETE"):
            done = key not in dynamic
        elif op == "APPEND":
            done = set(split_list(value)) <= set(split_list(current))
        else:
            done = not set(split_list(value)) & set(split_list(current))
        if not done:
            return False
    # The legacy AlterConfigs removes every dynamic config it does not name.
    named = {key for key, _, _ in change.ops}
    return not change.replace or not any(k in FACT_KEYS and k not in named for k in dynamic)
