"""The proxy's view of the cluster: the facts a policy needs, fetched lazily and cached briefly.

Cost per fact, on a cache miss (connection set-up and SASL not counted):
- TOPIC_STATE: one Metadata for the named topics, one for the topic ids, and one
  DescribeConfigs for the topics found (a request is skipped when it has nothing to ask).
- TOPIC_NAMES, TOTAL_PARTITIONS, BROKER_COUNT, BUDGET_USAGE: one all-topics Metadata, shared
  by the four (a retention budget also reads its scope's topics as TOPIC_STATE: their configs).
- BROKER_DEFAULTS: one DescribeConfigs on the connected broker (plus one Metadata the first
  time on a connection, to learn the broker ids).
- TOPIC_USAGE: never cached; `usage()` reads it afresh for every request an `in_use` rule
  selects (proxy/cluster/usage_reads.py says what that costs), within `usage_timeout_s`.

What is read is kept in a FactCache (proxy/cluster/fact_cache.py, which also says what a
forwarded change does to it); a key being read is not read again by another caller, who joins
that read (so overlapping sets share what they have in common). A caller that must judge on
facts read after a point (`since`, a `mark()`, for the facts in `fresh`: a mutation) takes only
entries and reads begun after it. The reads themselves are in proxy/cluster/fetches.py; they
go over a few ClusterConnections (proxy/cluster/pool.py). After a forwarded broker config
change, reads first wait until every connected broker shows it (proxy/cluster/unapplied_changes.py).

Brokers must support Metadata v12 and DescribeConfigs v4 (Kafka 2.8 and later).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from functools import partial
from typing import Any, TypeVar

from kafka_policy_proxy.codec.topic_view import ConfigResourceItem
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.model import EMPTY_CONFIGS, Fact, TopicState
from kafka_policy_proxy.policy.usage import TopicUsage
from kafka_policy_proxy.proxy.cluster.client import KafkaClient, SaslLogin
from kafka_policy_proxy.proxy.cluster.connection import ClusterConnection
from kafka_policy_proxy.proxy.cluster.discovery import BrokerDiscovery
from kafka_policy_proxy.proxy.cluster.fact_cache import (
    ALL_TOPICS,
    BROKER_DEFAULTS,
    FactCache,
    Key,
    id_key,
    name_key,
)
from kafka_policy_proxy.proxy.cluster.fetches import (
    fetch_all,
    fetch_defaults,
    fetch_ids,
    fetch_named,
    quoted,
    topic_configs,
)
from kafka_policy_proxy.proxy.cluster.pool import ConnectionPool
from kafka_policy_proxy.proxy.cluster.requests import (
    BROKER_RESOURCE,
    describe_configs_request,
)
from kafka_policy_proxy.proxy.cluster.unapplied_changes import (
    APPLIED_WAIT_S,
    NotShown,
    UnappliedChanges,
    shown_by,
)
from kafka_policy_proxy.proxy.cluster.unavailable import ClusterStateUnavailable, ReadFailed
from kafka_policy_proxy.proxy.cluster.usage_reads import read_usage
from kafka_policy_proxy.proxy.metrics import CLUSTER_STATE_REQUESTS

V = TypeVar("V")
# The in-use read asks every broker and each group coordinator: bounded as a whole.
USAGE_TIMEOUT_S = 15.0
Read = asyncio.Task[dict[Key, Any]]
Fetch = Callable[[ClusterConnection, list[Key]], Awaitable[Mapping[Key, V]]]

_AGGREGATE_FACTS = frozenset(
    {Fact.TOPIC_NAMES, Fact.TOTAL_PARTITIONS, Fact.BROKER_COUNT, Fact.BUDGET_USAGE}
)


class ClusterStateReader:
    """Reads cluster facts over the proxy's own connection, with a short per-fact cache."""

    def __init__(
        self,
        bootstrap: Sequence[tuple[str, int]],
        *,
        ttl_s: float = 5.0,
        request_timeout_s: float = 10.0,
        sasl: SaslLogin | None = None,
        tls: ssl.SSLContext | None = None,
        discovery: BrokerDiscovery | None = None,
        applied_wait_s: float = APPLIED_WAIT_S,
        connections: int = 2,
        unknown_id_ttl_s: float = 2.0,
        usage_timeout_s: float = USAGE_TIMEOUT_S,
    ) -> None:
        self._pool = ConnectionPool(
            bootstrap, connections, request_timeout_s=request_timeout_s, sasl=sasl, tls=tls
        )
        # The in-use read opens its own connections to every broker it asks.
        self._connect = partial(KafkaClient.connect, deadline=request_timeout_s, sasl=sasl, tls=tls)
        self.usage_timeout_s = usage_timeout_s
        self._discovery = discovery or BrokerDiscovery()
        self._cache: FactCache[Read] = FactCache(ttl_s, unknown_id_ttl_s)
        self._tasks: set[Read] = set()
        self._unapplied = UnappliedChanges(applied_wait_s)
        self._marks = 0

    def mark(self) -> int:
        """A point in the reader's order of events: reads begun after it have a later mark
        (a clock may show two moments as one), for `snapshot(since=...)`."""
        self._marks += 1
        return self._marks

    @property
    def last_read(self) -> float | None:
        """Loop time of the last answer from the cluster."""
        return self._pool.last_read

    @property
    def last_error(self) -> str | None:
        """Why the last read failed, until one succeeds."""
        return self._pool.last_error

    async def snapshot(
        self,
        facts: Collection[Fact],
        topics: Collection[str] = (),
        topic_ids: Collection[str] = (),
        *,
        fresh: Collection[Fact] = (),
        since: float | None = None,
    ) -> InMemoryCluster:
        """Fetch the facts asked for (TOPIC_STATE only for the topics named) as a ClusterState.

        The facts in `fresh` come from reads begun after `since` (a `mark()`).
        When TOPIC_NAMES, TOTAL_PARTITIONS or BROKER_COUNT is asked for, the snapshot also holds
        every other topic, but with Metadata only (no configs). `marked_for_deletion` is always
        False: KRaft removes a deleted topic from the metadata at once.
        """
        if self._unapplied:
            await self._await_applied()
        wanted = frozenset(facts)
        fresh = frozenset(fresh) if since is not None else frozenset()

        def not_before(*needed: Fact) -> float | None:
            return since if fresh.intersection(needed) else None

        no_read: dict[Key, Any] = {}

        async def nothing() -> dict[Key, Any]:
            return no_read

        names = sorted(set(topics)) if Fact.TOPIC_STATE in wanted else []
        ids = sorted(set(topic_ids)) if Fact.TOPIC_STATE in wanted else []
        # Independent reads, at once: on a pool they go out side by side.
        everything, found, by_id, result = await asyncio.gather(
            self._cached(
                "the topic list and broker count",
                [ALL_TOPICS],
                fetch_all,
                not_before(*_AGGREGATE_FACTS),
            )
            if wanted & _AGGREGATE_FACTS
            else nothing(),
            self._cached(
                f"the state of topic(s) {quoted(names)}",
                [name_key(n) for n in names],
                fetch_named,
                not_before(Fact.TOPIC_STATE, Fact.BUDGET_USAGE),
            )
            if names
            else nothing(),
            self._cached(
                f"the state of topic id(s) {quoted(ids)}",
                [id_key(i) for i in ids],
                fetch_ids,
                not_before(Fact.TOPIC_STATE),
            )
            if ids
            else nothing(),
            self._cached(
                "the broker default configs",
                [BROKER_DEFAULTS],
                partial(fetch_defaults, self._discovery),
                not_before(Fact.BROKER_DEFAULTS),
            )
            if Fact.BROKER_DEFAULTS in wanted
            else nothing(),
        )
        states: dict[str, TopicState] = {}
        brokers = 1
        if ALL_TOPICS in everything:
            topic_list, brokers = everything[ALL_TOPICS]
            states.update((t.name, t) for t in topic_list)
        for (_, name), state in found.items():
            if state is None:
                states.pop(name, None)
            else:
                states[name] = state
        states.update((s.name, s) for s in by_id.values() if s is not None)
        defaults = result.get(BROKER_DEFAULTS, EMPTY_CONFIGS)
        return InMemoryCluster(tuple(states.values()), brokers, defaults)

    def invalidate(self, topic: str) -> None:
        """Forget what is cached about `topic` and the all-topics facts (it was just changed)."""
        self._cache.invalidate(topic)

    def changed(self, state: TopicState) -> None:
        """The broker accepted a config change whose outcome is `state`: cache it as read now."""
        self._cache.changed(state, asyncio.get_running_loop().time())

    def deleted(self, topic: str | None, topic_id: str | None) -> None:
        """The broker deleted this topic: until the entries expire, it is known to be absent.

        Another broker may still show it for a moment (metadata propagates), so a read now
        could bring it back; what the proxy itself just did is the better fact.
        """
        self._cache.deleted(topic, topic_id, asyncio.get_running_loop().time())

    def forget_ids(self, topic_ids: Iterable[str]) -> None:
        """Forget what is cached about these topic ids, so that the next read asks the cluster."""
        self._cache.forget_ids(topic_ids)

    def unknown_ids(self, topic_ids: Iterable[str]) -> set[str]:
        """The ids a read found naming no topic a moment ago (`unknown_id_ttl_s`)."""
        now = asyncio.get_running_loop().time()
        return {i for i in topic_ids if self._cache.unknown_id(i, now)}

    def known_ids(self, topic_ids: Iterable[str]) -> set[str]:
        """The ids the cache holds a topic for (however long ago they were read)."""
        now = asyncio.get_running_loop().time()
        return {i for i in topic_ids if (hit := self._cache.cached(id_key(i), now)) and hit.value}

    def invalidate_broker_defaults(self, changes: Sequence[ConfigResourceItem] = ()) -> None:
        """Forget the broker defaults and every topic's configs (a broker config was changed:
        the topics that inherit it have new effective values).

        `changes` are the broker resources the brokers accepted: the next read first waits until
        the connected broker shows them, so that it cannot cache the values they replaced.
        """
        self._cache.forget_configs()
        self._unapplied.add(changes)

    async def _await_applied(self) -> None:
        """Wait until every connected broker shows the forwarded broker config changes; fail
        closed (ClusterStateUnavailable) if one does not within the wait."""
        address = ""

        async def shown(changes: Sequence[ConfigResourceItem]) -> bool:
            nonlocal address
            for conn in self._pool.connections:
                address = conn.address
                read = await conn.read(
                    "the broker configs just changed",
                    lambda conn=conn: self._shows(conn, changes),  # type: ignore[misc]
                )
                if not read:
                    return False
            return True

        try:
            waited = await self._unapplied.wait(shown)
        except NotShown as exc:
            raise ClusterStateUnavailable(
                f"the broker at {address} does not show the broker config "
                f"change the proxy forwarded after {exc.wait_s:g} s"
            ) from None
        if waited:
            # What reads cached while the broker lagged holds the old values.
            self._cache.forget_configs()

    async def _shows(self, conn: ClusterConnection, changes: Sequence[ConfigResourceItem]) -> bool:
        """Whether the connected broker's configs show every change that reaches its facts."""
        names = sorted({c.name for c in changes})
        response = await conn.call(describe_configs_request(BROKER_RESOURCE, names))
        return shown_by(response, changes)

    async def close(self) -> None:
        """Cancel in-flight fetches and close the connections."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._pool.close()

    async def usage(self, topics: Collection[str], max_groups: int) -> dict[str, TopicUsage]:
        """The in-use facts of these topics (the existing ones), read now, never cached: a
        delete is judged on what the cluster shows after it arrived. The whole read is bounded
        by `usage_timeout_s`; any failure raises ClusterStateUnavailable (fail closed)."""
        names = sorted(set(topics))
        if not names:
            return {}
        read_at = round(time.time() * 1000)

        async def fetch(conn: ClusterConnection) -> dict[str, TopicUsage]:
            try:
                async with asyncio.timeout(self.usage_timeout_s):
                    return await read_usage(conn, self._connect, names, max_groups, read_at)
            except TimeoutError:
                raise ReadFailed(f"timed out after {self.usage_timeout_s:g} s") from None

        async with self._pool.lease(len(names)) as conn:
            return await conn.read(
                f"the in-use facts of topic(s) {quoted(names)}", lambda: fetch(conn)
            )

    # -- uncached reads, for callers that page through the cluster themselves (snapshot)

    async def request(self, message: Any, what: str) -> Any:
        """Send one request on one of the reader's connections, uncached; failures name `what`."""
        async with self._pool.lease(1) as conn:
            return await conn.read(what, lambda: conn.call(message))

    async def topic_configs(self, names: Sequence[str]) -> dict[str, tuple[Any, ...]]:
        """Every config entry DescribeConfigs returns per topic, uncached; any error fails all."""
        async with self._pool.lease(len(names)) as conn:
            return await conn.read(
                f"the configs of {len(names)} topic(s)", lambda: topic_configs(conn, names)
            )

    # -- caching and coalescing

    async def _cached(
        self,
        what: str,
        keys: list[Key],
        fetch: Fetch[V],
        since: float | None = None,
    ) -> dict[Key, V]:
        """Values for `keys` from the cache, from in-flight fetches of them, or fetched now;
        with `since`, only from reads begun after that mark."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        result: dict[Key, V] = {}
        waiting: dict[Key, Read] = {}
        missing: list[Key] = []
        for key in keys:
            if (hit := self._cache.cached(key, now, since)) is not None:
                result[key] = hit.value
            elif (task := self._cache.reading(key, since)) is not None:
                waiting[key] = task
            else:
                missing.append(key)
        CLUSTER_STATE_REQUESTS.labels(result="hit").inc(len(result))
        # A miss is read now, or joins an identical read in flight.
        CLUSTER_STATE_REQUESTS.labels(result="miss").inc(len(waiting) + len(missing))
        if missing:
            began = self.mark()
            task = loop.create_task(self._fill(what, missing, fetch, began))
            self._tasks.add(task)
            self._cache.began(missing, task, began)
            task.add_done_callback(lambda done: self._settle(missing, done))
            waiting.update(dict.fromkeys(missing, task))
        for key, pending in waiting.items():
            # Shielded: one caller giving up must not cancel a fetch others wait for.
            result[key] = (await asyncio.shield(pending))[key]
        return result

    async def _fill(
        self, what: str, keys: list[Key], fetch: Fetch[V], began: int
    ) -> dict[Key, Any]:
        generation = self._cache.generation
        async with self._pool.lease(len(keys)) as conn:
            values = dict(await conn.read(what, lambda: fetch(conn, keys)))
        now = asyncio.get_running_loop().time()
        self._cache.fill({key: values[key] for key in keys}, now, generation, began)
        return values

    def _settle(self, keys: Iterable[Key], task: Read) -> None:
        self._tasks.discard(task)
        self._cache.ended(keys, task)
        if not task.cancelled():
            task.exception()  # retrieved here, so that a fetch nobody awaits logs nothing
