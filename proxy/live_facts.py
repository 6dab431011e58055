"""The proxy's fact source: the live cluster, read through the cluster-state reader's cache."""

from __future__ import annotations

from collections.abc import Sequence

from policy.engine import CompiledPolicy
from policy.judge import NO_FACTS, FactQuery, Facts, Judgement, Verdict
from policy.model import TopicRequest
from proxy.cluster_state import ClusterStateReader, ClusterStateUnavailable


class LiveFacts:
    """Reads the facts a judgement asks for from the cluster; raises ClusterStateUnavailable."""

    def __init__(self, reader: ClusterStateReader) -> None:
        self._reader = reader

    async def read(self, query: FactQuery) -> Facts:
        """The facts for the query, every one of them folded into the requests."""
        if not query.facts:
            return NO_FACTS
        cluster = await self._reader.snapshot(query.facts, query.names, query.ids)
        return Facts(cluster, query.facts)

    async def judge(
        self, policy: CompiledPolicy, requests: Sequence[TopicRequest]
    ) -> list[Verdict]:
        """Judge a batch with the one judge; unreadable facts deny it (fail closed)."""
        judgement = Judgement(policy, requests)
        try:
            facts = await self.read(judgement.query)
        except ClusterStateUnavailable as exc:
            return judgement.unavailable(str(exc))
        return judgement.decide(facts)

    def invalidate(self, topic: str) -> None:
        """The proxy forwarded a change to this topic: the next read must not use the cache."""
        self._reader.invalidate(topic)
