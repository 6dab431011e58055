"""An answer stays in proportion to its request: a reason repeated per topic is bounded."""

from __future__ import annotations

import importlib
import uuid
from collections.abc import Collection
from pathlib import Path
from typing import Any

from harness.messages import build
from kafka_policy_proxy.codec.registry import decode_exact, encode, request_class, response_class
from kafka_policy_proxy.policy.builders import delete_topic_request
from kafka_policy_proxy.policy.judge import MAX_REASON_CHARS, Judgement
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.policy.model import Fact, Principal
from kafka_policy_proxy.proxy.cluster.live_facts import LiveFacts
from kafka_policy_proxy.proxy.cluster.unavailable import ClusterStateUnavailable
from kafka_policy_proxy.proxy.filters.api import Answer
from kafka_policy_proxy.proxy.filters.topic_policy import TopicPolicyFilter
from tests.unit.proxy.contexts import context, settle
from tests.unit.proxy.enforcement_fakes import FakeReader, Records

POLICY = load_policy("version: 1\nrules:\n  - name: any\n    partitions: {max: 6}\n")
IDS = 2000
# Per entry of a DeleteTopics v6 answer: the id, a null name, the code and the message
# (MAX_REASON_CHARS of reason inside a fixed sentence, then the 48-character decision id suffix).
ENTRY_BYTES = 450


class _ListingReader(FakeReader):
    """Fails as the reader once did: the reason lists every id it was asked for."""

    async def snapshot(
        self,
        facts: Collection[Fact],
        topics: Collection[str] = (),
        topic_ids: Collection[str] = (),
        **when: Any,
    ) -> Any:
        listed = ", ".join(repr(i) for i in sorted(topic_ids))
        raise ClusterStateUnavailable(f"the state of topic id(s) {listed}: timed out")


def _delete_by_ids(ids: list[uuid.UUID]) -> Any:
    m = importlib.import_module(request_class(20, 6).__module__)
    topics = tuple(build(m.DeleteTopicState, name=None, topic_id=i) for i in ids)
    return build(m.DeleteTopicsRequest, topics=topics, timeout=30_000)


async def test_two_thousand_ids_get_an_answer_in_proportion_to_the_request(
    tmp_path: Path,
) -> None:
    ids = [uuid.uuid4() for _ in range(IDS)]
    request = _delete_by_ids(ids)
    facts = LiveFacts(_ListingReader(), (), max_ids=IDS)  # type: ignore[arg-type]
    policy_filter = TopicPolicyFilter(lambda: POLICY, facts, Records(tmp_path).recorder, -1)
    verdict = await settle(policy_filter.on_request(context(20, 6, request)))
    assert isinstance(verdict, Answer)
    response = decode_exact(response_class(20, 6), verdict.body)
    assert [r.topic_id for r in response.responses] == ids
    assert all("[cluster-state]" in r.error_message for r in response.responses)
    # One summary record for the request: every entry quotes its id, after the cut reason.
    assert len({r.error_message[-48:] for r in response.responses}) == 1
    assert (
        response.responses[0].error_message.endswith(")")
        and "(decision " in (response.responses[0].error_message[-48:])
    )
    # The request is 36 KB; the reason alone listed 88 KB, once per id before (176 MB).
    assert len(encode(request)) < 40_000
    assert len(verdict.body) <= ENTRY_BYTES * IDS  # 800,007 bytes measured; 160,320,007 before ids


def test_an_unreadable_cluster_reason_is_cut_with_a_count() -> None:
    alice = Principal("User:alice")
    requests = [delete_topic_request(f"t{i}", principal=alice) for i in range(3)]
    reason = "x" * 10_000
    for verdict in Judgement(POLICY, requests).unavailable(reason):
        assert verdict.decision is not None
        message = verdict.decision.message
        cut = f"{'x' * MAX_REASON_CHARS}... ({10_000 - MAX_REASON_CHARS} more characters)"
        assert cut in message
        assert len(message) < MAX_REASON_CHARS + 150


def test_a_short_reason_is_kept_whole() -> None:
    alice = Principal("User:alice")
    (verdict,) = Judgement(POLICY, [delete_topic_request("t", principal=alice)]).unavailable(
        "cannot connect to any bootstrap server (refused)"
    )
    assert verdict.decision is not None
    assert "(cannot connect to any bootstrap server (refused));" in verdict.decision.message
