"""The proxy's view of the cluster: the facts a policy needs, fetched lazily and cached briefly.

Cost per fact, on a cache miss (connection set-up and SASL not counted):
- TOPIC_STATE: one Metadata for the named topics, one for the topic ids, and one
  DescribeConfigs for the topics found (a request is skipped when it has nothing to ask).
- TOPIC_NAMES, TOTAL_PARTITIONS, BROKER_COUNT: one all-topics Metadata, shared by the three.
- BROKER_DEFAULTS: one DescribeConfigs on the connected broker (plus one Metadata the first
  time on a connection, to learn the broker ids).

After a topic change the proxy forwarded and the broker accepted, the topic's new state is
cached where the request determines it (a config set: `changed`), and dropped otherwise.

After the proxy forwards a broker config change, every read first waits until the connected
broker shows it (one DescribeConfigs per poll): a broker applies a change a moment after the
controller commits it, and a read before that would cache the old defaults and topic configs.

Brokers must support Metadata v12 and DescribeConfigs v4 (Kafka 2.8 and later).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import uuid
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequestTopic
from kio.schema.types import TopicName

from codec.errors import CodecError
from codec.topic_view import ConfigResourceItem
from policy.cluster import InMemoryCluster
from policy.config_synonyms import BROKER_TO_TOPIC
from policy.configs import split_list
from policy.model import EMPTY_CONFIGS, ConfigMap, Fact, TopicState
from proxy.cluster.broker_defaults import CREATE_DEFAULTS, topic_defaults
from proxy.cluster.client import KafkaClient, SaslAuthenticationError, SaslCredentials
from proxy.cluster.discovery import BrokerDiscovery, brokers_request
from proxy.cluster.requests import (
    BROKER_RESOURCE,
    TOPIC_RESOURCE,
    describe_configs_request,
    kafka_error,
    metadata_request,
    topic_from_metadata,
)
from proxy.metrics import CLUSTER_STATE_REQUESTS

V = TypeVar("V")
# Cache keys: ("topic", name), ("id", topic id), or one of the two below.
Key = tuple[str, ...]

PRUNE_MIN = 1024

# Metadata errors that mean "no such topic" rather than "cannot tell".
_ABSENT = frozenset(
    {
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.unknown_topic_id,
        ErrorCode.invalid_topic_exception,
    }
)
# DescribeConfigs' config_source for a value set on the topic itself, and on the broker itself.
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
# The broker configs the facts are read from: a change to any other one changes no fact.
FACT_KEYS = frozenset(BROKER_TO_TOPIC) | frozenset(CREATE_DEFAULTS)
# How long a read waits for the connected broker to apply a forwarded broker config change
# (metadata reaches every broker within moments), and the pauses between its polls.
APPLIED_WAIT_S = 5.0
APPLIED_POLL_S = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2)
_ALL: Key = ("all-topics",)
_DEFAULTS: Key = ("broker-defaults",)


class ClusterStateUnavailable(Exception):
    """A cluster fact could not be read; the message says which and why."""


class _Unavailable(Exception):
    """A failure whose message is complete except for what was being read."""

    def __init__(self, message: str, *, retry: bool = False) -> None:
        super().__init__(message)
        self.retry = retry  # the connection broke: one more try on a new one may work


class ClusterStateReader:
    """Reads cluster facts over the proxy's own connection, with a short per-fact cache."""

    def __init__(
        self,
        bootstrap: Sequence[tuple[str, int]],
        *,
        ttl_s: float = 5.0,
        request_timeout_s: float = 10.0,
        sasl: SaslCredentials | None = None,
        tls: ssl.SSLContext | None = None,
        discovery: BrokerDiscovery | None = None,
        applied_wait_s: float = APPLIED_WAIT_S,
    ) -> None:
        if not bootstrap:
            raise ValueError("ClusterStateReader needs at least one bootstrap server")
        self._bootstrap = tuple(bootstrap)
        self._next_server = 0
        self._ttl = ttl_s
        self._timeout = request_timeout_s
        self._sasl = sasl
        self._tls = tls
        self.last_read: float | None = None  # loop time of the last answer from the cluster
        self.last_error: str | None = None  # why the last read failed, until one succeeds
        self._client: KafkaClient | None = None
        self._address = ""
        self._reused = False  # the connection has answered before, so it may have gone stale
        self._node_id: int | None = None
        self._discovery = discovery or BrokerDiscovery()
        self._connect_lock = asyncio.Lock()
        self._cache: dict[Key, tuple[float, Any]] = {}
        self._inflight: dict[Key, asyncio.Task[dict[Key, Any]]] = {}
        self._tasks: set[asyncio.Task[dict[Key, Any]]] = set()
        # Bumped by invalidate(): a fetch that started before it must not fill the cache.
        self._epoch = 0
        # Expired entries are dropped when the cache doubles, so that names clients make up
        # cannot grow it without bound.
        self._prune_at = PRUNE_MIN
        # Broker config changes the brokers accepted that the connected broker may not show yet.
        self._unapplied: list[ConfigResourceItem] = []
        self._applied_lock = asyncio.Lock()
        self._applied_wait_s = applied_wait_s

    async def snapshot(
        self, facts: Collection[Fact], topics: Collection[str] = (), topic_ids: Collection[str] = ()
    ) -> InMemoryCluster:
        """Fetch the facts asked for (TOPIC_STATE only for the topics named) as a ClusterState.

        When TOPIC_NAMES, TOTAL_PARTITIONS or BROKER_COUNT is asked for, the snapshot also holds
        every other topic, but with Metadata only (no configs). `marked_for_deletion` is always
        False: KRaft removes a deleted topic from the metadata at once.
        """
        if self._unapplied:
            await self._await_applied()
        wanted = frozenset(facts)
        states: dict[str, TopicState] = {}
        brokers = 1
        defaults = EMPTY_CONFIGS
        if wanted & {Fact.TOPIC_NAMES, Fact.TOTAL_PARTITIONS, Fact.BROKER_COUNT}:
            everything = await self._cached(
                "the topic list and broker count", [_ALL], self._fetch_all
            )
            topic_list, brokers = everything[_ALL]
            states.update((t.name, t) for t in topic_list)
        if Fact.TOPIC_STATE in wanted:
            names = sorted(set(topics))
            if names:
                found = await self._cached(
                    f"the state of topic(s) {_quoted(names)}",
                    [("topic", n) for n in names],
                    self._fetch_named,
                )
                for (_, name), state in found.items():
                    if state is None:
                        states.pop(name, None)
                    else:
                        states[name] = state
            ids = sorted(set(topic_ids))
            if ids:
                by_id = await self._cached(
                    f"the state of topic id(s) {_quoted(ids)}",
                    [("id", i) for i in ids],
                    self._fetch_ids,
                )
                states.update((s.name, s) for s in by_id.values() if s is not None)
        if Fact.BROKER_DEFAULTS in wanted:
            result = await self._cached(
                "the broker default configs", [_DEFAULTS], self._fetch_defaults
            )
            defaults = result[_DEFAULTS]
        return InMemoryCluster(tuple(states.values()), brokers, defaults)

    def invalidate(self, topic: str) -> None:
        """Forget what is cached about `topic` and the all-topics facts (it was just changed)."""
        self._forget(("topic", topic), topic=topic)

    def changed(self, state: TopicState) -> None:
        """The broker accepted a config change whose outcome is `state`: cache it as read now.

        Whatever was cached or in flight about the topic is dropped first, so that no read
        that started before the change can put the old state back. The all-topics facts stay:
        a config change moves no topic name, partition or broker.
        """
        self._forget(("topic", state.name), topic=state.name, aggregates=False)
        expires = asyncio.get_running_loop().time() + self._ttl
        self._cache[("topic", state.name)] = (expires, state)

    def deleted(self, topic: str | None, topic_id: str | None) -> None:
        """The broker deleted this topic: until the entries expire, it is known to be absent.

        Another broker may still show it for a moment (metadata propagates), so a read now
        could bring it back; what the proxy itself just did is the better fact.
        """
        keys: list[Key] = []
        if topic is not None:
            self._forget(("topic", topic), topic=topic)
            keys.append(("topic", topic))
        if topic_id is not None:
            self._forget(("id", topic_id), topic_id=topic_id)
            keys.append(("id", topic_id))
        expires = asyncio.get_running_loop().time() + self._ttl
        for key in keys:
            self._cache[key] = (expires, None)

    def forget_ids(self, topic_ids: Iterable[str]) -> None:
        """Forget what is cached about these topic ids, so that the next read asks the cluster."""
        for topic_id in topic_ids:
            self._forget(("id", topic_id))

    def invalidate_broker_defaults(self, changes: Sequence[ConfigResourceItem] = ()) -> None:
        """Forget the broker defaults and every topic's configs (a broker config was changed:
        the topics that inherit it have new effective values).

        `changes` are the broker resources the brokers accepted: the next read first waits until
        the connected broker shows them, so that it cannot cache the values they replaced.
        """
        self._forget_configs()
        self._unapplied.extend(c for c in changes if c.resource_type == BROKER_RESOURCE)

    def _forget_configs(self) -> None:
        self._epoch += 1
        stale = [
            k
            for k, (_, value) in self._cache.items()
            if k in (_DEFAULTS, _ALL) or isinstance(value, TopicState)
        ]
        for k in stale:
            del self._cache[k]
        # A read in flight may have seen the old values.
        self._inflight.clear()

    async def _await_applied(self) -> None:
        """Wait until the connected broker shows the forwarded broker config changes; fail closed
        (ClusterStateUnavailable) if it does not within the wait."""
        async with self._applied_lock:
            changes = list(self._unapplied)
            if not changes:
                return  # another read waited for them
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self._applied_wait_s
            pauses = iter(APPLIED_POLL_S)
            # A failed read raises and leaves the changes awaited by the next read.
            while not await self._read(
                "the broker configs just changed", lambda: self._shows(changes)
            ):
                if loop.time() >= deadline:
                    del self._unapplied[: len(changes)]
                    raise ClusterStateUnavailable(
                        f"the broker at {self._address} does not show the broker config "
                        f"change the proxy forwarded after {self._applied_wait_s:g} s"
                    )
                await asyncio.sleep(next(pauses, APPLIED_POLL_S[-1]))
            del self._unapplied[: len(changes)]
            # What reads cached while the broker lagged holds the old values.
            self._forget_configs()

    async def _shows(self, changes: Sequence[ConfigResourceItem]) -> bool:
        """Whether the connected broker's configs show every change that reaches its facts."""
        names = sorted({c.name for c in changes})
        response = await self._call(describe_configs_request(BROKER_RESOURCE, names))
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
        return all(_shows(seen[c.name], c) for c in changes if c.name in seen)

    def _forget(
        self,
        key: Key,
        topic: str | None = None,
        topic_id: str | None = None,
        *,
        aggregates: bool = True,
    ) -> None:
        """Drop `key`, every entry holding the topic named or identified, and (unless told
        otherwise) the aggregates."""
        self._epoch += 1
        changed = topic is not None or topic_id is not None
        aggregate = _ALL if aggregates else None

        def holds(value: Any) -> bool:
            return isinstance(value, TopicState) and (
                value.name == topic or (topic_id is not None and str(value.topic_id) == topic_id)
            )

        stale = [
            k
            for k, (_, value) in self._cache.items()
            if k == key or (changed and (k == aggregate or holds(value)))
        ]
        for k in stale:
            del self._cache[k]
        # Callers arriving from now on must not join a fetch that started before the change;
        # an id lookup in flight may resolve to the changed topic.
        doomed = [
            k for k in self._inflight if k == key or (changed and (k == aggregate or k[0] == "id"))
        ]
        for k in doomed:
            del self._inflight[k]

    async def close(self) -> None:
        """Cancel in-flight fetches and close the connection."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._disconnect()

    # -- uncached reads, for callers that page through the cluster themselves (snapshot)

    async def request(self, message: Any, what: str) -> Any:
        """Send one request on the reader's connection, uncached; failures name `what`."""
        return await self._read(what, lambda: self._call(message))

    async def topic_configs(self, names: Sequence[str]) -> dict[str, tuple[Any, ...]]:
        """Every config entry DescribeConfigs returns per topic, uncached; any error fails all."""
        return await self._read(
            f"the configs of {len(names)} topic(s)", lambda: self._topic_configs(names)
        )

    # -- caching and coalescing

    async def _cached(
        self,
        what: str,
        keys: list[Key],
        fetch: Callable[[list[Key]], Awaitable[Mapping[Key, V]]],
    ) -> dict[Key, V]:
        """Values for `keys` from the cache, from identical in-flight fetches, or fetched now."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        result: dict[Key, V] = {}
        waiting: dict[Key, asyncio.Task[dict[Key, Any]]] = {}
        missing: list[Key] = []
        for key in keys:
            entry = self._cache.get(key)
            if entry is not None and entry[0] > now:
                result[key] = entry[1]
            elif (task := self._inflight.get(key)) is not None:
                waiting[key] = task
            else:
                missing.append(key)
        CLUSTER_STATE_REQUESTS.labels(result="hit").inc(len(result))
        # A miss is read now, or joins an identical read in flight.
        CLUSTER_STATE_REQUESTS.labels(result="miss").inc(len(waiting) + len(missing))
        if missing:
            task = loop.create_task(self._fill(what, missing, fetch))
            self._tasks.add(task)
            for key in missing:
                self._inflight[key] = task
            task.add_done_callback(lambda done: self._settle(missing, done))
            waiting.update(dict.fromkeys(missing, task))
        for key, pending in waiting.items():
            # Shielded: one caller giving up must not cancel a fetch others wait for.
            result[key] = (await asyncio.shield(pending))[key]
        return result

    async def _fill(
        self, what: str, keys: list[Key], fetch: Callable[[list[Key]], Awaitable[Mapping[Key, V]]]
    ) -> dict[Key, Any]:
        epoch = self._epoch
        values = dict(await self._read(what, lambda: fetch(keys)))
        if self._epoch == epoch:
            now = asyncio.get_running_loop().time()
            if len(self._cache) >= self._prune_at:
                self._cache = {k: e for k, e in self._cache.items() if e[0] > now}
                self._prune_at = max(PRUNE_MIN, 2 * len(self._cache))
            for key in keys:
                self._cache[key] = (now + self._ttl, values[key])
        return values

    async def _read(self, what: str, fetch: Callable[[], Awaitable[V]]) -> V:
        """Run `fetch`, once more if its connection broke; any failure names `what`."""
        try:
            try:
                return await fetch()
            except _Unavailable as exc:
                if not exc.retry:
                    raise
                return await fetch()
        except _Unavailable as exc:
            CLUSTER_STATE_REQUESTS.labels(result="error").inc()
            self.last_error = f"cannot read {what} from the cluster: {exc}"
            raise ClusterStateUnavailable(self.last_error) from None
        # Fail closed on anything else too (a broker answer this code did not expect).
        except Exception as exc:
            CLUSTER_STATE_REQUESTS.labels(result="error").inc()
            self.last_error = f"cannot read {what} from the cluster: {type(exc).__name__}: {exc}"
            raise ClusterStateUnavailable(self.last_error) from exc

    def _settle(self, keys: Iterable[Key], task: asyncio.Task[dict[Key, Any]]) -> None:
        self._tasks.discard(task)
        for key in keys:
            if self._inflight.get(key) is task:
                del self._inflight[key]
        if not task.cancelled():
            task.exception()  # retrieved here, so that a fetch nobody awaits logs nothing

    # -- fetches

    async def _fetch_all(self, keys: list[Key]) -> dict[Key, Any]:
        response = await self._call(metadata_request(None))
        for topic in response.topics:
            if topic.error_code is not ErrorCode.none:
                raise _Unavailable(
                    f"Metadata for topic {topic.name!r}: {kafka_error(topic.error_code)}"
                )
        topics = tuple(topic_from_metadata(t) for t in response.topics)
        return {_ALL: (topics, len(response.brokers))}

    async def _fetch_named(self, keys: list[Key]) -> dict[Key, TopicState | None]:
        names = [key[1] for key in keys]
        response = await self._call(
            metadata_request(
                tuple(MetadataRequestTopic(topic_id=None, name=TopicName(n)) for n in names)
            )
        )
        found = await self._with_configs(response.topics)
        return {("topic", name): found.get(name) for name in names}

    async def _fetch_ids(self, keys: list[Key]) -> dict[Key, TopicState | None]:
        wanted: dict[Key, uuid.UUID] = {}
        for key in keys:
            with contextlib.suppress(ValueError):
                topic_id = uuid.UUID(key[1])
                # The zero id is Kafka's "no id": it never names a topic.
                if topic_id.int:
                    wanted[key] = topic_id
        found: dict[str, TopicState] = {}
        if wanted:
            request = tuple(MetadataRequestTopic(topic_id=i, name=None) for i in wanted.values())
            response = await self._call(metadata_request(request))
            states = await self._with_configs(response.topics)
            found = {str(s.topic_id): s for s in states.values()}
        return {key: found.get(str(wanted.get(key))) for key in keys}

    async def _with_configs(self, metadata_topics: Iterable[Any]) -> dict[str, TopicState]:
        """Topic states from Metadata topics, with their effective configs; absent ones left out."""
        states: dict[str, TopicState] = {}
        for topic in metadata_topics:
            if topic.error_code in _ABSENT:
                continue
            if topic.error_code is not ErrorCode.none:
                label = topic.name if topic.name is not None else topic.topic_id
                raise _Unavailable(f"Metadata for topic {label!r}: {kafka_error(topic.error_code)}")
            states[topic.name] = topic_from_metadata(topic)
        if not states:
            return states
        entries = await self._topic_configs(list(states))
        return {
            name: replace(
                state,
                configs=ConfigMap((c.name, c.value) for c in entries[name]),
                overrides=frozenset(
                    c.name for c in entries[name] if c.config_source == DYNAMIC_TOPIC_CONFIG
                ),
            )
            for name, state in states.items()
        }

    async def _topic_configs(self, names: Sequence[str]) -> dict[str, tuple[Any, ...]]:
        response = await self._call(describe_configs_request(TOPIC_RESOURCE, names))
        entries: dict[str, tuple[Any, ...]] = {}
        for result in response.results:
            if result.error_code is not ErrorCode.none:
                detail = kafka_error(result.error_code, result.error_message)
                raise _Unavailable(f"DescribeConfigs for topic {result.resource_name!r}: {detail}")
            entries[result.resource_name] = result.configs
        missing = set(names) - entries.keys()
        if missing:
            raise _Unavailable(f"DescribeConfigs left out topic(s) {_quoted(sorted(missing))}")
        return entries

    async def _fetch_defaults(self, keys: list[Key]) -> dict[Key, ConfigMap]:
        client = await self._connected()
        node_ids = [self._node_id] if self._node_id is not None else await self._broker_ids(client)
        # A broker describes only its own configs and answers INVALID_REQUEST for other ids,
        # so asking for every id finds the one this connection reached.
        request = describe_configs_request(BROKER_RESOURCE, [str(n) for n in node_ids])
        response = await self._call(request, client)
        errors = []
        for result in response.results:
            if result.error_code is ErrorCode.none:
                self._node_id = int(result.resource_name)
                return {_DEFAULTS: topic_defaults({c.name: c.value for c in result.configs})}
            detail = kafka_error(result.error_code, result.error_message)
            errors.append(f"broker {result.resource_name}: {detail}")
        raise _Unavailable(
            f"DescribeConfigs on {self._address}: {'; '.join(errors) or 'no result'}"
        )

    async def _broker_ids(self, client: KafkaClient) -> list[int]:
        response = await self._call(brokers_request(), client)
        return sorted(self._discovery.learn(response).nodes)

    # -- the connection

    async def _call(self, message: Any, client: KafkaClient | None = None) -> Any:
        """Send one request on the shared connection; any failure drops the connection."""
        if client is None:
            client = await self._connected()
        reused = self._reused
        try:
            response = await client.request(message)
        except (OSError, EOFError, CodecError) as exc:
            address = self._address
            await self._disconnect(client)
            name = type(message).__name__.removesuffix("Request")
            # A timeout is not retried: the caller has waited long enough. A broken connection
            # is, once: a reused one may have gone stale, and a fresh one may have met a
            # broker that is stopping or starting while another server is there to try.
            broken = not isinstance(exc, (TimeoutError, CodecError))
            retry = broken and (reused or len(self._bootstrap) > 1)
            raise _Unavailable(
                f"{name} to {address} failed: {_describe(exc)}", retry=retry
            ) from None
        self._reused = True
        self.last_read = asyncio.get_running_loop().time()
        self.last_error = None
        return response

    async def _connected(self) -> KafkaClient:
        async with self._connect_lock:
            if self._client is not None:
                return self._client
            failures = []
            for _ in self._bootstrap:
                host, port = self._bootstrap[self._next_server]
                try:
                    self._client = await KafkaClient.connect(
                        host, port, self._timeout, self._sasl, self._tls
                    )
                except SaslAuthenticationError as exc:
                    # The credentials are the cluster's: another server would refuse them too.
                    raise _Unavailable(f"{host}:{port}: {exc}") from None
                except (OSError, EOFError, CodecError) as exc:
                    failures.append(f"{host}:{port}: {_describe(exc)}")
                    self._next_server = (self._next_server + 1) % len(self._bootstrap)
                    continue
                self._address = f"{host}:{port}"
                self._reused = False
                return self._client
            raise _Unavailable(f"cannot connect to any bootstrap server ({'; '.join(failures)})")

    async def _disconnect(self, client: KafkaClient | None = None) -> None:
        """Close the connection (if it is still `client`); the next one goes to the next server."""
        current = self._client
        if current is None or (client is not None and client is not current):
            return
        self._client = None
        self._node_id = None
        self._next_server = (self._next_server + 1) % len(self._bootstrap)
        await current.close()


def _shows(dynamic: Mapping[str, str | None], change: ConfigResourceItem) -> bool:
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


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, EOFError):
        return "connection closed by the broker"
    return str(exc) or type(exc).__name__


def _quoted(names: Iterable[str]) -> str:
    return ", ".join(repr(n) for n in names)
