"""What a budget counts when the judge remembers work between requests (issue 34's speed-ups).

The judge counts a budget's usage from the cluster's names in sorted order, only those under
the budget's prefix, and remembers the count for the frozen cluster it counted last: every
request judged against another cluster, or a replayed event's own topic state, must still see
exactly its own cluster's usage.
"""

from __future__ import annotations

from typing import Any

from kafka_policy_proxy.policy.builders import create_partitions_request, create_request
from kafka_policy_proxy.policy.judge import ClusterFacts, Judgement, judge
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.policy.model import Principal, TopicRequest
from kafka_policy_proxy.policy.offline.recorded_facts import RecordedFacts
from tests.unit.policy.helpers import cluster, topic

TEAM_A = Principal("User:team-a", "cli", "10.0.0.9")
PER_TEAM = load_policy(
    {
        "budgets": [
            {
                "name": "team-partitions",
                "principals": ["User:team-*"],
                "topic_prefix": "{user}.",
                "max_partitions": 500,
            },
            {
                "name": "orders-topics",
                "topic_prefix": "orders.",
                "topic": r"orders\.[a-z]+",
                "max_topics": 3,
            },
        ]
    },
    "test",
)


def usage(verdict: Any) -> int:
    return int(verdict.decision.budgets[0].usage)


def test_only_the_names_under_the_prefix_are_counted() -> None:
    # Names that sort next to "team-a." but are not under it, on both sides.
    state = cluster(
        topic("team-a", 100),
        topic("team-a-x", 100),
        topic("team-a.", 1),
        topic("team-a.a", 2),
        topic("team-a.zz", 4),
        topic("team-a/", 100),
        topic("team-a_b", 100),
        topic("team-b.a", 100),
        topic("team-", 100),
    )
    (v,) = judge(PER_TEAM, [create_request("team-a.new", 3, principal=TEAM_A)], ClusterFacts(state))
    assert usage(v) == 7


def test_a_prefix_and_a_pattern_count_the_names_matching_both() -> None:
    state = cluster(
        topic("orders.a"), topic("orders.b2"), topic("orders.c"), topic("ordersx"), topic("x.a")
    )
    (v,) = judge(PER_TEAM, [create_request("orders.d", 1, principal=TEAM_A)], ClusterFacts(state))
    assert v.decision.allowed
    assert [(b.name, b.usage) for b in v.decision.budgets] == [("orders-topics", 2)]


def test_each_cluster_is_counted_as_it_is() -> None:
    big = cluster(topic("team-a.old", 480))
    small = cluster(topic("team-a.old", 100))
    request = create_request("team-a.x", 24, principal=TEAM_A)
    seen = [
        judge(PER_TEAM, [request], ClusterFacts(state))[0]
        for state in (big, small, big, cluster(topic("team-a.old", 480)))
    ]
    assert [usage(v) for v in seen] == [480, 100, 480, 480]
    assert [v.decision.allowed for v in seen] == [False, True, False, False]


def test_a_replayed_event_counts_its_own_state_of_its_topic() -> None:
    snapshot = cluster(topic("team-a.old", 100), topic("team-a.more", 200))
    recorded: TopicRequest = create_partitions_request(
        "team-a.more", 250, principal=TEAM_A, current=topic("team-a.more", 190)
    )
    created = create_request("team-a.x", 24, principal=TEAM_A)
    seen = []
    for request in (created, recorded, created):
        judgement = Judgement(PER_TEAM, (request,))
        (v,) = judgement.decide(RecordedFacts(request, snapshot).read(judgement.query))
        seen.append(v)
    # The event's own state of team-a.more (190 partitions) stands in for the snapshot's 200.
    assert [usage(v) for v in seen] == [300, 290, 300]
    assert [v.decision.allowed for v in seen] == [True, True, True]
