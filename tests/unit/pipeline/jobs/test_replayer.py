"""One recorded request judged again, without Spark: the facts an event carries or lacks, what a
snapshot adds, and the records of no topic (refusals, broker config changes)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.audit_data import (
    broker_config_events,
    example_cluster,
    refused_record,
    write_snapshot,
)
from kafka_policy_proxy.pipeline.jobs.replayer import (
    ALL_TOPICS_FROM_SNAPSHOT,
    ALL_TOPICS_NOT_RECORDED,
    Replayer,
)
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.decision_log import UNKNOWN_TOPIC_RULE as UNKNOWN
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.policy.model import Fact, TopicRequest
from kafka_policy_proxy.policy.offline.recorded_facts import defaults_folded, missing_facts
from kafka_policy_proxy.policy.offline.snapshot_format import parse_snapshot
from tests.unit.pipeline.jobs.replay_inputs import (
    ALICE_THREADS,
    CLUSTER_WIDE,
    EXAMPLE,
    LONG_RETENTION,
    TINY_SEGMENTS,
    candidate,
    grant_alice_threads,
)


def test_missing_facts_follow_what_the_event_carries(events: list[dict[str, Any]]) -> None:
    creates = [TopicRequest.from_dict(e["request"]) for e in events if e["action"] == "create"]
    folded = creates[0]
    assert defaults_folded(folded) is True  # the policy asked for defaults: they are in configs
    bare = TopicRequest.from_dict(
        {**folded.to_dict(), "requested": {"changes": [], "config_source": "create"}}
    )
    assert defaults_folded(bare) is False
    everything = frozenset(Fact)
    assert missing_facts(folded, everything) == CLUSTER_WIDE
    assert missing_facts(bare, everything) == CLUSTER_WIDE | {Fact.BROKER_DEFAULTS}
    delete = next(TopicRequest.from_dict(e["request"]) for e in events if e["action"] == "delete")
    assert delete.current is None
    assert defaults_folded(delete) is None
    assert missing_facts(delete, frozenset({Fact.TOPIC_STATE, Fact.BROKER_DEFAULTS})) == {
        Fact.TOPIC_STATE
    }


def test_with_a_snapshot_the_events_topic_state_wins(events: list[dict[str, Any]]) -> None:
    cluster = example_cluster()
    grow = next(e["request"] for e in events if e["request"]["alter_kind"] == "partitions")
    name, before = grow["current"]["name"], grow["current"]["partitions"]
    added = grow["requested"]["partitions"] - before
    # The snapshot was taken later: by then the topic had 1000 more partitions.
    later = InMemoryCluster.of(
        [
            replace(t, partitions=t.partitions + 1000) if t.name == name else t
            for t in cluster.topics
        ],
        cluster.brokers,
        cluster.defaults,
    )
    budget = cluster.total_partitions() + added  # exactly reached with the recorded state
    policy = load_policy(
        {"version": 1, "rules": [{"name": "budget", "cluster": {"max_total_partitions": budget}}]}
    )
    assert Replayer(policy, later).replay(json.dumps(grow))[:2] == ("allowed", [])
    one_more = {**grow, "requested": {**grow["requested"], "partitions": before + added + 1}}
    assert Replayer(policy, later).replay(json.dumps(one_more))[:2] == ("denied", ["budget"])


def test_a_topic_the_snapshot_lacks_is_unknown_as_the_proxy_answers_it(
    events: list[dict[str, Any]],
) -> None:
    policy = load_policy(
        {"version": 1, "rules": [{"name": "growth", "partitions": {"max_increase": 1}}]}
    )
    request = next(e["request"] for e in events if e["request"]["alter_kind"] == "partitions")
    text = json.dumps({**request, "current": None})
    assert Replayer(policy, None).replay(text) == (
        "unknown",
        [],
        [],
        [],
        "needs cluster facts: topic_state; pass --snapshot",
    )
    decision, rules, messages, denying, reason = Replayer(policy, InMemoryCluster()).replay(text)
    assert (decision, rules, denying) == ("unknown-topic", [UNKNOWN], [UNKNOWN])
    assert f"topic {request['topic']!r} does not exist" in messages[0]
    assert reason == "the topic is not in the snapshot"
    decision, rules, *_ = Replayer(policy, example_cluster()).replay(text)
    grew = request["requested"]["partitions"] - request["current"]["partitions"]
    assert (decision, rules) == (("allowed", []) if grew <= 1 else ("denied", ["growth"]))


def test_a_refusal_before_authentication_stays_denied_whatever_the_candidate() -> None:
    # Even a candidate letting anyone call anything cannot undo the proxy's protocol refusal.
    policy = load_policy(
        "version: 1\nrules: [{name: r, partitions: {max: 9}}]\n"
        "admin_apis: [{name: all, principals: ['*'], apis: ['*']}]\n"
    )
    record = refused_record()
    decision, rules, messages, denying, reason = Replayer(policy, None).replay(
        json.dumps(record["request"])
    )
    assert (decision, rules, denying) == (
        "denied",
        ["authentication-order"],
        ["authentication-order"],
    )
    assert messages == [v["message"] for v in record["violations"]]
    assert reason == "refused before any judgement"


def test_a_broker_config_change_is_judged_by_the_candidates_grants(tmp_path: Path) -> None:
    recorded = load_policy(EXAMPLE.read_text(), str(EXAMPLE))
    (record,) = broker_config_events(recorded, [ALICE_THREADS], example_cluster())
    assert record["decision"] == "denied"
    text = json.dumps(record["request"])
    # The recorded policy denies it again, with the recorded violation; no facts needed.
    decision, rules, messages, denying, reason = Replayer(recorded, None).replay(text)
    assert (decision, rules, denying, reason) == (
        "denied",
        ["broker-configs"],
        ["broker-configs"],
        None,
    )
    assert messages == [v["message"] for v in record["violations"]]
    granting = load_policy(candidate(tmp_path, "grants.yaml", grant_alice_threads).read_text())
    assert Replayer(granting, None).replay(text) == ("allowed", [], [], [], None)
    # Within the grant's bounds only.
    many = json.dumps(record["request"]).replace('"value": "8"', '"value": "32"')
    decision, rules, messages, _, _ = Replayer(granting, None).replay(many)
    assert (decision, rules) == ("denied", ["alice-threads"])
    assert "num.io.threads would be" in messages[0]


def test_a_new_topic_default_is_judged_against_the_snapshots_topics(tmp_path: Path) -> None:
    policy = load_policy(EXAMPLE.read_text(), str(EXAMPLE))
    cluster = example_cluster()
    retention, segments = broker_config_events(policy, [LONG_RETENTION, TINY_SEGMENTS], cluster)
    assert (retention["decision"], segments["decision"]) == ("denied", "audit-would-deny")
    text = json.dumps(retention["request"])
    assert Replayer(policy, None).replay(text) == (
        "unknown",
        [],
        [],
        [],
        ALL_TOPICS_NOT_RECORDED,
    )

    def snapshot(name: str, topics: InMemoryCluster) -> InMemoryCluster:
        lines = write_snapshot(tmp_path / name, topics).read_text().splitlines()
        return parse_snapshot(lines).cluster

    # The snapshot of the cluster it was judged in: the same decision, the same topics named.
    decision, rules, messages, _, reason = Replayer(policy, snapshot("s", cluster)).replay(text)
    assert (decision, rules, reason) == ("denied", ["inherited-defaults"], ALL_TOPICS_FROM_SNAPSHOT)
    assert messages == [v["message"] for v in retention["violations"]]
    # Topics that set retention.ms themselves (source DYNAMIC_TOPIC_CONFIG) do not inherit it.
    overriding = InMemoryCluster.of(
        [replace(t, overrides=frozenset({"retention.ms"})) for t in cluster.topics],
        cluster.brokers,
        cluster.defaults,
    )
    assert Replayer(policy, snapshot("o", overriding)).replay(text)[0] == "allowed"
    # A key no topic rule of the candidate checks changes no topic's verdict: no snapshot needed.
    unchecked = load_policy(
        candidate(
            tmp_path,
            "no-segments.yaml",
            lambda d: d.update(rules=[r for r in d["rules"] if r["name"] != "segment-size"]),
        ).read_text()
    )
    assert Replayer(unchecked, None).replay(json.dumps(segments["request"])) == (
        "allowed",
        [],
        [],
        [],
        None,
    )
