"""The proxy's fact source: the live cluster, read through the cluster-state reader's cache.

Freshness: a mutation is judged on facts read after it arrived, so that it sees every change
any proxy (another worker, another instance) made before it; the cache serves Metadata, and
the existence checks of creates (the broker refuses a create of a topic that exists). Creates
read the broker defaults fresh: their effective configs fall back to them.

Cost: a request makes the proxy resolve at most `max_ids` topic ids it does not know; ids
beyond that, and ids a read found unknown a moment ago, are answered UNKNOWN_TOPIC_ID without
a read. Ids still unknown after the first read are read again (a topic created a moment ago)
only when there are at most RETRY_MAX_IDS of them. So one request makes the proxy ask the
cluster for at most (1 + len(RESOLVE_RETRY_S)) times its own ids, and never more than `max_ids`
+ len(RESOLVE_RETRY_S) * RETRY_MAX_IDS ids in all.

Time: a topic judgement is made at the wall clock's instant when it starts (`clock`, read
once per batch, before its facts are read): the policy's exceptions waive while that instant
is before their expiry, so one stops waiving at its expiry with no reload.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Executor
from dataclasses import replace
from datetime import UTC, datetime

from kafka_policy_proxy.codec.topic_view import ConfigResourceItem
from kafka_policy_proxy.policy.broker_configs import BrokerConfigDecision, BrokerConfigRequest
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.judge import (
    NO_FACTS,
    BrokerConfigJudgement,
    FactQuery,
    Facts,
    Judgement,
    Verdict,
)
from kafka_policy_proxy.policy.model import Action, Fact, TopicRequest, TopicState
from kafka_policy_proxy.proxy.cluster.budget_locks import with_pending
from kafka_policy_proxy.proxy.cluster.reader import ClusterStateReader
from kafka_policy_proxy.proxy.cluster.unavailable import ClusterStateUnavailable
from kafka_policy_proxy.proxy.metrics import CLUSTER_STATE_IDS_NOT_READ

# Pauses before each further read of topic ids the first read did not find: a topic just
# created reaches every broker's metadata within a moment, so about 0.75 s in all before the
# proxy answers UNKNOWN_TOPIC_ID itself.
RESOLVE_RETRY_S = (0.05, 0.1, 0.2, 0.4)
# More unknown ids than this are not read again: a batch of made-up ids is not worth it.
RETRY_MAX_IDS = 8
MAX_IDS = 100
# Batches longer than this are judged on the executor (a thread hop costs ~0.1 ms, which a
# single-topic request should not pay); shorter ones on the event loop.
INLINE_BATCH = 64


class LiveFacts:
    """Reads the facts a judgement asks for from the cluster; raises ClusterStateUnavailable."""

    def __init__(
        self,
        reader: ClusterStateReader,
        resolve_retry_s: Sequence[float] = RESOLVE_RETRY_S,
        *,
        max_ids: int = MAX_IDS,
        executor: Executor | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._reader = reader
        self._clock = clock
        self._resolve_retry_s = tuple(resolve_retry_s)
        self._max_ids = max_ids
        self._executor = executor

    async def read(
        self,
        query: FactQuery,
        fresh: Collection[Fact] = (),
        since: float | None = None,
        max_groups: int = 0,
    ) -> Facts:
        """The facts for the query, every one of them folded into the requests; those in
        `fresh` read after the reader's mark `since`; the in-use facts always read now,
        examining at most `max_groups` consumer groups."""
        if not query.facts:
            return NO_FACTS
        names: Collection[str] = query.names
        wanted = query.facts
        if query.all_topics or query.scoped is not None:
            listing = await self._reader.snapshot({Fact.TOPIC_NAMES}, fresh=fresh, since=since)
            if query.all_topics:
                names = listing.topic_names(include_internal=True) | query.names
            else:
                # A retention budget reads the configs of the topics it counts, and no others.
                scoped = query.scoped
                assert scoped is not None
                names = {n for n in listing.topic_names() if scoped(n)} | query.names
                wanted = wanted | {Fact.TOPIC_STATE}
        cluster = await self._reader.snapshot(wanted, names, query.ids, fresh=fresh, since=since)
        if Fact.TOPIC_USAGE in query.facts:
            by_id = (cluster.topic_by_id(i) for i in query.usage_ids)
            used = set(query.usage) | {state.name for state in by_id if state is not None}
            usage = await self._reader.usage(used, max_groups)
            cluster = replace(cluster, usage=tuple(usage.values()))
        return Facts(cluster, query.facts)

    async def judge_broker_configs(
        self, policy: CompiledPolicy, requests: Sequence[BrokerConfigRequest]
    ) -> list[BrokerConfigDecision]:
        """Judge non-topic config resources; unreadable topics deny those that needed them."""
        judgement = BrokerConfigJudgement(policy, requests)
        since = self._reader.mark()
        try:
            # A new default is judged against every topic as it is now.
            facts = await self.read(judgement.query, frozenset(Fact), since)
        except ClusterStateUnavailable as exc:
            return judgement.unavailable(str(exc))
        if not judgement.query.all_topics:
            return judgement.decide(facts)
        # Judging every topic takes about 0.1 ms each (1 s for 10,000): off the event loop.
        return await asyncio.to_thread(judgement.decide, facts)

    async def judge(
        self,
        policy: CompiledPolicy,
        requests: Sequence[TopicRequest],
        pending: Sequence[TopicState] = (),
    ) -> list[Verdict]:
        """Judge a batch with the one judge; unreadable facts deny it (fail closed).

        `pending` are changes the broker accepted that the reads may not show yet (a budget
        turn's ledger, proxy/cluster/budget_locks.py): laid over what is read.

        A few topic ids the first read did not find are read again a few times over a short
        while; an id still unknown, or not read (see the module's docstring), stays undecided.
        """
        judgement = Judgement(policy, requests, now=self._clock())
        since = self._reader.mark()
        fresh = fresh_facts(requests, judgement.query)
        query = judgement.query
        if query.ids:
            query = replace(query, ids=frozenset(self._ids_to_read(query.ids)))
        try:
            groups = policy.max_groups
            verdicts = await self._decide(
                judgement,
                await self._read(query, fresh, since, pending, groups),
                len(requests),
            )
            for pause in self._resolve_retry_s:
                unknown = [i for i in unresolved_ids(verdicts) if i in query.ids]
                if not unknown or len(unknown) > RETRY_MAX_IDS:
                    break
                await asyncio.sleep(pause)
                again = await self._reader.snapshot(
                    {Fact.TOPIC_STATE}, topic_ids=unknown, fresh=fresh, since=self._reader.mark()
                )
                if any(again.topic_by_id(i) is not None for i in unknown):
                    # The rest was read after `since` already: this re-read finds it cached.
                    verdicts = await self._decide(
                        judgement,
                        await self._read(query, fresh, since, pending, groups),
                        len(requests),
                    )
        except ClusterStateUnavailable as exc:
            return judgement.unavailable(str(exc))
        return verdicts

    async def _read(
        self,
        query: FactQuery,
        fresh: Collection[Fact],
        since: float,
        pending: Sequence[TopicState],
        max_groups: int,
    ) -> Facts:
        facts = await self.read(query, fresh, since, max_groups)
        if not pending or not isinstance(facts.cluster, InMemoryCluster):
            return facts
        return Facts(with_pending(facts.cluster, pending), facts.resolve)

    def _ids_to_read(self, ids: Collection[str]) -> list[str]:
        """The ids worth a read: not found a moment ago, and the unknown ones up to the cap."""
        gone = self._reader.unknown_ids(ids)
        known = self._reader.known_ids(ids)
        unknown = sorted(set(ids) - gone - known)
        CLUSTER_STATE_IDS_NOT_READ.labels(reason="known_unknown").inc(len(gone))
        CLUSTER_STATE_IDS_NOT_READ.labels(reason="over_cap").inc(
            max(0, len(unknown) - self._max_ids)
        )
        return [*known, *unknown[: self._max_ids]]

    async def _decide(self, judgement: Judgement, facts: Facts, size: int) -> list[Verdict]:
        """Judge a long batch on the executor (off the event loop), a short one here."""
        if self._executor is None or size <= INLINE_BATCH:
            return judgement.decide(facts)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, judgement.decide, facts)

    def invalidate(self, topic: str) -> None:
        """The proxy forwarded a change to this topic: the next read must not use the cache."""
        self._reader.invalidate(topic)

    def changed(self, state: TopicState) -> None:
        """The broker accepted a change to this topic whose outcome is `state`."""
        self._reader.changed(state)

    def deleted(self, topic: str | None, topic_id: str | None) -> None:
        """The broker deleted this topic: it is known to be absent (by name and by id)."""
        self._reader.deleted(topic, topic_id)

    def invalidate_broker_defaults(self, changes: Sequence[ConfigResourceItem] = ()) -> None:
        """The proxy forwarded a broker config change: re-read the defaults next time, once the
        connected broker shows `changes` (those the brokers accepted)."""
        self._reader.invalidate_broker_defaults(changes)


def fresh_facts(
    requests: Sequence[TopicRequest], query: FactQuery | None = None
) -> frozenset[Fact]:
    """The facts a batch must read fresh: every one for a change to existing topics or one a
    budget judges (its usage is the cluster's now), the broker defaults for creates (what they
    do not set falls back to them)."""
    if any(request.action is not Action.CREATE for request in requests):
        return frozenset(Fact)
    if query is not None and Fact.BUDGET_USAGE in query.facts:
        return frozenset(Fact)
    return frozenset({Fact.BROKER_DEFAULTS})


def unresolved_ids(verdicts: Sequence[Verdict]) -> list[str]:
    """The topic ids of undecided verdicts that name no known topic."""
    return [
        v.request.topic_id
        for v in verdicts
        if v.decision is None and not v.request.name and v.request.topic_id is not None
    ]
