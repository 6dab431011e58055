"""The proxy's fact source: the live cluster, read through the cluster-state reader's cache."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence

from kafka_policy_proxy.codec.topic_view import ConfigResourceItem
from kafka_policy_proxy.policy.broker_configs import BrokerConfigDecision, BrokerConfigRequest
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.judge import (
    NO_FACTS,
    BrokerConfigJudgement,
    FactQuery,
    Facts,
    Judgement,
    Verdict,
)
from kafka_policy_proxy.policy.model import Fact, TopicRequest, TopicState
from kafka_policy_proxy.proxy.cluster.reader import ClusterStateReader
from kafka_policy_proxy.proxy.cluster.unavailable import ClusterStateUnavailable

# Pauses between fresh reads of a topic id nothing resolves: a topic just created reaches
# every broker's metadata within a moment, so about 0.75 s in all before the proxy answers
# UNKNOWN_TOPIC_ID itself.
RESOLVE_RETRY_S = (0.0, 0.05, 0.1, 0.2, 0.4)


class LiveFacts:
    """Reads the facts a judgement asks for from the cluster; raises ClusterStateUnavailable."""

    def __init__(
        self, reader: ClusterStateReader, resolve_retry_s: Sequence[float] = RESOLVE_RETRY_S
    ) -> None:
        self._reader = reader
        self._resolve_retry_s = tuple(resolve_retry_s)

    async def read(self, query: FactQuery) -> Facts:
        """The facts for the query, every one of them folded into the requests."""
        if not query.facts:
            return NO_FACTS
        names: Collection[str] = query.names
        if query.all_topics:
            listing = await self._reader.snapshot({Fact.TOPIC_NAMES})
            names = listing.topic_names(include_internal=True) | query.names
        cluster = await self._reader.snapshot(query.facts, names, query.ids)
        return Facts(cluster, query.facts)

    async def judge_broker_configs(
        self, policy: CompiledPolicy, requests: Sequence[BrokerConfigRequest]
    ) -> list[BrokerConfigDecision]:
        """Judge non-topic config resources; unreadable topics deny those that needed them."""
        judgement = BrokerConfigJudgement(policy, requests)
        try:
            facts = await self.read(judgement.query)
        except ClusterStateUnavailable as exc:
            return judgement.unavailable(str(exc))
        if not judgement.query.all_topics:
            return judgement.decide(facts)
        # Judging every topic takes about 0.1 ms each (1 s for 10,000): off the event loop.
        return await asyncio.to_thread(judgement.decide, facts)

    async def judge(
        self, policy: CompiledPolicy, requests: Sequence[TopicRequest]
    ) -> list[Verdict]:
        """Judge a batch with the one judge; unreadable facts deny it (fail closed).

        A topic id nothing resolves is read again from the cluster, bypassing the cache, a
        few times over a short while; if it is still unknown its verdict stays undecided.
        """
        judgement = Judgement(policy, requests)
        try:
            verdicts = judgement.decide(await self.read(judgement.query))
            for pause in self._resolve_retry_s:
                unknown = unresolved_ids(verdicts)
                if not unknown:
                    break
                await asyncio.sleep(pause)
                self._reader.forget_ids(unknown)
                verdicts = judgement.decide(await self.read(judgement.query))
        except ClusterStateUnavailable as exc:
            return judgement.unavailable(str(exc))
        return verdicts

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


def unresolved_ids(verdicts: Sequence[Verdict]) -> list[str]:
    """The topic ids of undecided verdicts that name no known topic."""
    return [
        v.request.topic_id
        for v in verdicts
        if v.decision is None and not v.request.name and v.request.topic_id is not None
    ]
