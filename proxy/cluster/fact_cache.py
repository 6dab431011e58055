"""The cluster facts the proxy has read, each kept for a while: no I/O, no clock of its own.

In the manner of aiokafka's ClusterMetadata, this only holds what the reader fetched; the
reader (proxy/cluster/reader.py) does the fetching and passes the time in. Entries are keyed
by topic name, by topic id, or as one of the two aggregates (the all-topics listing and the
broker defaults). A topic known to be absent is an entry too, holding None.

The cache is never trusted past a change the proxy forwarded: after a topic change the broker
accepted, the topic's new state is stored where the request determines it (`changed`), and
every entry holding the topic is dropped otherwise. Each change also bumps `generation`, so
that a read that started before it cannot store what it saw, and it tells the reads in flight
that no caller may join them any more.

Each entry and read in flight also keeps when its read began (a mark in the reader's order of
events), so that a caller that must judge on facts read after a given mark (a mutation,
`since`) takes only those; what the proxy
stored itself (`changed`, `deleted`) never counts as read. A topic id found unknown is kept
for `unknown_ttl_s` only, and any forwarded change to a topic (a create among them, whose id
is new) drops every such entry.

A forwarded change finds the entries it drops through indexes (by topic name, by topic id,
and the unknown ids), not by a walk of every entry: a 1,000-topic CreateTopics on a cache of
100,000 topics would otherwise walk it 1,000 times (docs/benchmarks.md, growth curves).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from math import inf
from typing import Any, Generic, TypeVar

from kafka_policy_proxy.policy.model import TopicState

# A read in flight, as the reader tracks it (an asyncio task there; any object here).
H = TypeVar("H")
# ("topic", name), ("id", topic id), ALL_TOPICS or BROKER_DEFAULTS.
Key = tuple[str, ...]

ALL_TOPICS: Key = ("all-topics",)
BROKER_DEFAULTS: Key = ("broker-defaults",)
# Expired entries are dropped when the cache doubles past this, so that names clients make
# up cannot grow it without bound.
PRUNE_MIN = 1024


def name_key(topic: str) -> Key:
    """The key of a topic's state looked up by name."""
    return ("topic", topic)


def id_key(topic_id: str) -> Key:
    """The key of a topic's state looked up by topic id."""
    return ("id", topic_id)


@dataclass(frozen=True, slots=True)
class Hit:
    """A fresh entry; its value may be None (the topic is known to be absent)."""

    value: Any


class FactCache(Generic[H]):
    """Facts by key with an expiry, and the reads in flight for them; the caller gives the time."""

    def __init__(self, ttl_s: float, unknown_ttl_s: float | None = None) -> None:
        self.ttl_s = ttl_s
        self.unknown_ttl_s = ttl_s if unknown_ttl_s is None else min(ttl_s, unknown_ttl_s)
        # key -> (expiry, value, when its read began; -inf for what the proxy stored itself)
        self._entries: dict[Key, tuple[float, Any, float]] = {}
        # The keys whose value is a TopicState, by its name and by str(topic_id) (when it has
        # one); the id keys holding None. Kept by _store and _drop, so they hold exactly what
        # _entries does. (Tuples: a topic is held under one to three keys; a set costs 216 B.)
        self._by_name: dict[str, tuple[Key, ...]] = {}
        self._by_id: dict[str, tuple[Key, ...]] = {}
        self._unknown_ids: set[Key] = set()
        self._reading: dict[Key, tuple[H, float]] = {}
        self._prune_at = PRUNE_MIN
        self.generation = 0  # bumped by every invalidation

    def __len__(self) -> int:
        return len(self._entries)

    # -- lookups

    def cached(self, key: Key, now: float, since: float | None = None) -> Hit | None:
        """The entry for `key` if it has not expired by `now` (and, with `since`, its read
        began after that mark)."""
        entry = self._entries.get(key)
        if entry is not None and entry[0] > now and (since is None or entry[2] > since):
            return Hit(entry[1])
        return None

    def unknown_id(self, topic_id: str, now: float) -> bool:
        """Whether a read found no topic with this id a moment ago (or the proxy deleted it)."""
        entry = self._entries.get(id_key(topic_id))
        return entry is not None and entry[0] > now and entry[1] is None

    def reading(self, key: Key, since: float | None = None) -> H | None:
        """The read in flight for `key` (with `since`, begun after that mark) that a caller
        may still join."""
        entry = self._reading.get(key)
        if entry is None or (since is not None and entry[1] <= since):
            return None
        return entry[0]

    # -- reads

    def began(self, keys: Iterable[Key], read: H, started: float = -inf) -> None:
        """`read`, begun at `started`, is fetching these keys: callers arriving now may join it."""
        for key in keys:
            self._reading[key] = (read, started)

    def ended(self, keys: Iterable[Key], read: H) -> None:
        """`read` has finished (its keys may already have been taken from it)."""
        for key in keys:
            entry = self._reading.get(key)
            if entry is not None and entry[0] is read:
                del self._reading[key]

    def fill(
        self, values: Mapping[Key, Any], now: float, generation: int, started: float = -inf
    ) -> bool:
        """Store what a read begun at mark `started` (unknown: never fresh), in `generation`,
        found, unless something was invalidated since (it may hold the old state); whether it
        was."""
        if generation != self.generation:
            return False
        if len(self._entries) >= self._prune_at:
            for key in [k for k, e in self._entries.items() if e[0] <= now]:
                self._drop(key)
            self._prune_at = max(PRUNE_MIN, 2 * len(self._entries))
        for key, value in values.items():
            ttl = self.unknown_ttl_s if value is None and key[0] == "id" else self.ttl_s
            self._store(key, (now + ttl, value, started))
        return True

    # -- after a change the proxy forwarded

    def invalidate(self, topic: str) -> None:
        """Forget what is held about `topic` and the all-topics listing (it was just changed)."""
        self._forget(name_key(topic), topic=topic)

    def changed(self, state: TopicState, now: float) -> None:
        """The broker accepted a config change whose outcome is `state`: hold it as read now.

        Whatever was held or in flight about the topic is dropped first, so that no read that
        started before the change can put the old state back. The all-topics listing stays:
        a config change moves no topic name, partition or broker.
        """
        self._forget(name_key(state.name), topic=state.name, aggregates=False)
        self._store(name_key(state.name), (now + self.ttl_s, state, -inf))

    def deleted(self, topic: str | None, topic_id: str | None, now: float) -> None:
        """The broker deleted this topic: until the entries expire, it is known to be absent."""
        keys: list[Key] = []
        if topic is not None:
            self._forget(name_key(topic), topic=topic)
            keys.append(name_key(topic))
        if topic_id is not None:
            self._forget(id_key(topic_id), topic_id=topic_id)
            keys.append(id_key(topic_id))
        for key in keys:
            self._store(key, (now + self.ttl_s, None, -inf))

    def forget_ids(self, topic_ids: Iterable[str]) -> None:
        """Forget these topic ids, so that the next lookup misses and the reader asks again."""
        for topic_id in topic_ids:
            self._forget(id_key(topic_id))

    def forget_configs(self) -> None:
        """Forget the broker defaults, the all-topics listing and every topic's state (a broker
        config changed: the topics that inherit it have new effective values)."""
        self.generation += 1
        stale = [
            k
            for k, (_, value, _) in self._entries.items()
            if k in (BROKER_DEFAULTS, ALL_TOPICS) or isinstance(value, TopicState)
        ]
        for k in stale:
            self._drop(k)
        # A read in flight may have seen the old values.
        self._reading.clear()

    def _forget(
        self,
        key: Key,
        topic: str | None = None,
        topic_id: str | None = None,
        *,
        aggregates: bool = True,
    ) -> None:
        """Drop `key`, every entry holding the topic named or identified, and (unless told
        otherwise) the all-topics listing."""
        self.generation += 1
        changed = topic is not None or topic_id is not None
        aggregate = ALL_TOPICS if aggregates else None
        stale = {key}
        if changed:
            if aggregate is not None:
                stale.add(aggregate)
            # Every entry holding the topic, by its name or its id.
            if topic is not None:
                stale.update(self._by_name.get(topic, ()))
            if topic_id is not None:
                stale.update(self._by_id.get(topic_id, ()))
            # A topic the proxy forwarded a change to may be new: no unknown id may hide it.
            stale.update(self._unknown_ids)
        for k in stale:
            self._drop(k)
        # Callers arriving from now on must not join a read that started before the change;
        # an id lookup in flight may resolve to the changed topic.
        doomed = [
            k for k in self._reading if k == key or (changed and (k == aggregate or k[0] == "id"))
        ]
        for k in doomed:
            del self._reading[k]

    def _store(self, key: Key, entry: tuple[float, Any, float]) -> None:
        """Hold `entry` under `key`, replacing (and unindexing) what was there."""
        self._drop(key)
        self._entries[key] = entry
        value = entry[1]
        if isinstance(value, TopicState):
            _index(self._by_name, value.name, key)
            if value.topic_id is not None:
                _index(self._by_id, str(value.topic_id), key)
        elif value is None and key[0] == "id":
            self._unknown_ids.add(key)

    def _drop(self, key: Key) -> None:
        """Forget `key`'s entry, if any, and its place in the indexes."""
        entry = self._entries.pop(key, None)
        if entry is None:
            return
        value = entry[1]
        if isinstance(value, TopicState):
            _unindex(self._by_name, value.name, key)
            if value.topic_id is not None:
                _unindex(self._by_id, str(value.topic_id), key)
        else:
            self._unknown_ids.discard(key)


def _index(index: dict[str, tuple[Key, ...]], at: str, key: Key) -> None:
    index[at] = (*index.get(at, ()), key)


def _unindex(index: dict[str, tuple[Key, ...]], at: str, key: Key) -> None:
    keys = tuple(k for k in index.get(at, ()) if k != key)
    if keys:
        index[at] = keys
    else:
        index.pop(at, None)
