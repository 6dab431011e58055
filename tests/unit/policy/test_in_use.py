"""The in-use guard (`in_use:`): its schema, and its decisions from described usage."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kafka_policy_proxy.pipeline.jobs.replayer import Replayer
from kafka_policy_proxy.policy.decision_log import DecisionRecord, Stamp, decision_record
from kafka_policy_proxy.policy.judge import ClusterFacts, Judgement, Verdict, judge
from kafka_policy_proxy.policy.loader import PolicyError
from kafka_policy_proxy.policy.model import Action, Fact, TopicRequest, TopicState
from kafka_policy_proxy.policy.offline.cluster_spec import ClusterSpec
from kafka_policy_proxy.policy.offline.recorded_facts import RecordedFacts
from kafka_policy_proxy.policy.usage import GroupUsage, TopicUsage, epoch_ms
from kafka_policy_proxy.policy.usage_checks import ago
from tests.unit.policy.helpers import compile_rules

READ_AT = "2026-11-29T02:00:00Z"
RULE = {
    "name": "in-use",
    "match": {"actions": ["delete", "delete_records"]},
    "in_use": {"written_within": "15m", "consumed_within": "15m", "max_groups": 5},
}


def described(**usage: Any) -> ClusterSpec:
    return ClusterSpec.model_validate(
        {"topics": [{"name": "orders", "partitions": 2, "in_use": {"read_at": READ_AT, **usage}}]}
    )


def decide(request: TopicRequest, rule: dict[str, Any] = RULE, **usage: Any) -> Verdict:
    (verdict,) = judge(compile_rules(rule), [request], ClusterFacts(described(**usage).build()))
    return verdict


def message(request: TopicRequest, **usage: Any) -> str | None:
    decision = decide(request, **usage).decision
    assert decision is not None
    return None if decision.allowed else decision.message


DELETE = TopicRequest("orders", Action.DELETE)


def records(**offsets: int) -> TopicRequest:
    return TopicRequest(
        "orders",
        Action.DELETE_RECORDS,
        record_offsets=tuple((int(p[1:]), o) for p, o in offsets.items()),
    )


@pytest.mark.parametrize(
    ("in_use", "refusal"),
    [
        ({"written_within": "soon"}, "in_use.written_within"),
        ({"consumed_within": "-1m"}, "must not be negative"),
        ({"max_groups": 0}, "in_use.max_groups"),
        ({"every": "1m"}, "in_use.every"),
    ],
)
def test_a_bad_in_use_is_refused_naming_the_key(in_use: dict[str, Any], refusal: str) -> None:
    with pytest.raises(PolicyError, match=refusal.replace(".", r"\.")):
        compile_rules({"name": "r", "match": {"actions": ["delete"]}, "in_use": in_use})


def test_in_use_on_another_action_is_refused() -> None:
    rule = {"name": "r", "match": {"actions": ["create", "delete"]}, "in_use": {}}
    with pytest.raises(PolicyError, match=r"rules\[0\]\.in_use: .*delete and delete_records only"):
        compile_rules(rule)


def test_a_topic_written_within_the_window_is_not_deleted_and_the_time_is_named() -> None:
    text = message(DELETE, latest={0: "2026-11-29T01:59:50Z", 1: "2026-11-29T01:00:00Z"})
    assert text == (
        "[in-use] topic 'orders' is in use: last written at 2026-11-29T01:59:50.000Z, 10s "
        "before the check; it may be deleted once it is no longer used (none within: writes "
        "15m, consumers 15m)"
    )
    assert message(DELETE, latest={0: "2026-11-29T01:44:59Z"}) is None


def test_a_group_with_members_keeps_the_topic_whatever_it_committed() -> None:
    text = message(DELETE, groups=[{"group": "billing", "state": "Stable", "members": True}])
    assert text is not None and "consumer group(s) 'billing' (members on the topic)" in text


def test_a_group_is_active_while_its_last_consumed_record_is_within_the_window() -> None:
    recent = {"group": "audit", "committed": {0: 7}, "consumed_at": {0: "2026-11-29T01:50:00Z"}}
    text = message(DELETE, groups=[recent])
    assert text is not None
    assert "'audit' (consumed a record of 2026-11-29T01:50:00.000Z, 10m before the check)" in text
    old = recent | {"consumed_at": {0: "2026-11-29T01:00:00Z"}}
    assert message(DELETE, groups=[old]) is None


def test_a_commit_that_cannot_be_dated_keeps_the_topic_fail_closed() -> None:
    text = message(DELETE, groups=[{"group": "lost", "committed": {1: 0}}])
    assert text is not None
    assert "'lost' (committed offset 0 on partition 1, whose time cannot be established)" in text


def test_without_consumed_within_every_group_with_commits_counts() -> None:
    rule = {"name": "r", "match": {"actions": ["delete"]}, "in_use": {}}
    old = {"group": "g", "committed": {0: 3}, "consumed_at": {0: "2020-01-01T00:00:00Z"}}
    verdict = decide(DELETE, rule, latest={0: READ_AT}, groups=[old])
    assert verdict.decision is not None and not verdict.decision.allowed
    assert "'g' (offsets committed)" in verdict.decision.message
    assert "last written" not in verdict.decision.message  # writes are not checked


def test_a_message_names_a_few_groups_then_how_many_more() -> None:
    groups = [{"group": f"g{i}", "members": True} for i in range(5)]
    text = message(DELETE, groups=groups)
    assert text is not None and "'g2' (members on the topic) and 2 more;" in text


def test_more_groups_than_the_bound_deny_saying_so() -> None:
    text = message(DELETE, groups_listed=6)
    assert text == (
        "[in-use] topic 'orders': the cluster has 6 consumer groups, more than the 5 the in-use "
        "check examines (max_groups); denied because its use cannot be checked"
    )
    assert message(records(p0=1), groups_listed=6) == text


def test_facts_that_were_not_read_deny() -> None:
    unread = ClusterSpec.model_validate({"topics": [{"name": "orders"}]}).build()
    (verdict,) = judge(compile_rules(RULE), [DELETE], ClusterFacts(unread))
    assert verdict.decision is not None and "were not read" in verdict.decision.message
    (missing,) = judge(compile_rules(RULE), [DELETE], ClusterFacts(ClusterSpec().build()))
    assert missing.decision is not None and "does not exist" in missing.decision.message


GROUPS = [
    {"group": "slow", "committed": {0: 40, 1: 5}, "consumed_at": {0: READ_AT, 1: READ_AT}},
    {"group": "fast", "members": True, "committed": {0: 90}},
    {"group": "gone", "committed": {0: 1}, "consumed_at": {0: "2020-01-01T00:00:00Z"}},
]


def test_delete_records_stops_at_the_lowest_offset_an_active_group_committed() -> None:
    assert message(records(p0=40, p1=5), groups=GROUPS) is None
    text = message(records(p0=41), groups=GROUPS)
    assert text == (
        "[in-use] topic 'orders': partition 0: deleting before offset 41 would delete records "
        "group 'slow' has not consumed (committed offset 40, the lowest of 2 active groups); "
        "records may be deleted up to offset 40"
    )


def test_delete_records_to_the_high_watermark_is_judged_at_it() -> None:
    assert message(records(p1=-1), groups=GROUPS, ends={1: 5}) is None
    text = message(records(p1=-1), groups=GROUPS, ends={1: 6})
    assert text is not None and "deleting before offset 6" in text
    unread = message(records(p1=-1), groups=GROUPS)
    assert unread is not None and "the high watermark (offset -1) was not read" in unread


def test_the_facts_are_read_only_for_the_topics_a_rule_selects() -> None:
    policy = compile_rules(RULE | {"match": {"actions": ["delete"], "topic_prefix": "o"}})
    requests = [DELETE, TopicRequest("payments", Action.DELETE)]
    query = Judgement(policy, requests).query
    assert Fact.TOPIC_USAGE in query.facts and query.usage == {"orders"}
    by_id = Judgement(policy, [TopicRequest(None, Action.DELETE, topic_id="id-1")]).query
    assert by_id.usage_ids == {"id-1"}
    assert (
        Fact.TOPIC_USAGE
        not in Judgement(
            compile_rules({**RULE, "in_use": None, "deny": True}), [DELETE]
        ).query.facts
    )


def test_the_record_carries_the_facts_and_replay_decides_on_them() -> None:
    verdict = decide(DELETE, latest={0: "2026-11-29T01:59:50Z"}, groups=GROUPS)
    assert verdict.decision is not None and verdict.request.usage is not None
    stamp = Stamp(
        "2026-11-29T02:00:00.000001Z", "d1", "sha256:x", None, "p", 1, "c", "DeleteTopics", 20, 6
    )
    record = decision_record(verdict.request, verdict.decision, stamp)
    DecisionRecord.model_validate(record)
    assert record["in_use"]["read_at"] == "2026-11-29T02:00:00.000Z"
    assert [g["group"] for g in record["in_use"]["groups"]] == ["slow", "fast", "gone"]
    assert "in_use" not in record["request"]

    replayer = Replayer(compile_rules(RULE), None)
    decision, _, messages, *_ = replayer.replay(
        json.dumps(record["request"]), in_use=json.dumps(record["in_use"])
    )
    assert (decision, messages) == ("denied", [verdict.decision.message])
    decision, *_, reason = replayer.replay(json.dumps(record["request"]))
    assert decision == "unknown" and reason is not None and "in-use facts" in reason


def test_recorded_facts_serve_the_recorded_usage() -> None:
    usage = TopicUsage("orders", epoch_ms(READ_AT), groups=(GroupUsage("g", members=True),))
    request = TopicRequest("orders", Action.DELETE, current=TopicState("orders"), usage=usage)
    judgement = Judgement(compile_rules(RULE), [request])
    (verdict,) = judgement.decide(RecordedFacts(request).read(judgement.query))
    assert verdict.decision is not None and "'g' (members on the topic)" in verdict.decision.message


def test_usage_round_trips_through_json() -> None:
    usage = described(latest={0: READ_AT}, ends={0: 3}, groups=GROUPS).build().topic_usage("orders")
    assert usage is not None
    assert TopicUsage.from_dict(usage.to_dict()) == usage


@pytest.mark.parametrize(
    ("ms", "text"),
    [(0, "0ms"), (999, "999ms"), (10_000, "10s"), (200_000, "3m20s"), (90_061_000, "1d1h")],
)
def test_durations_read_as_people_write_them(ms: int, text: str) -> None:
    assert ago(ms) == text


ROOT = Path(__file__).resolve().parents[3]
DOC = (ROOT / "docs/policy.md").read_text()
SECTION = DOC.split("### `in_use`: in-use guards on deletes")[1].split("\n### ")[0]


def test_the_docs_rule_and_described_topic_load_and_its_messages_are_the_examples() -> None:
    [rule] = yaml.safe_load(SECTION.split("```yaml\n")[1].split("```")[0])
    example = yaml.safe_load((ROOT / "examples/policy.yaml").read_text())
    assert rule in example["rules"]
    tests = yaml.safe_load((ROOT / "examples/policy-tests.yaml").read_text())
    cluster = ClusterSpec.model_validate(tests["cluster"]).build()
    policy = compile_rules(rule)
    live = cluster.topic("shipping.live")
    requests = [
        TopicRequest("shipping.live", Action.DELETE, current=live),
        TopicRequest(
            "shipping.live", Action.DELETE_RECORDS, current=live, record_offsets=((0, -1),)
        ),
    ]
    shown = SECTION.split("**Messages.**")[1].split("```\n")[1].split("```")[0].splitlines()
    judged = [
        v.decision.message for v in judge(policy, requests, ClusterFacts(cluster)) if v.decision
    ]
    assert judged == shown
    described = DOC.split("describes `shipping.live` so:")[1].split("```yaml\n")[1].split("```")[0]
    usage = (
        ClusterSpec.model_validate(yaml.safe_load(described)).build().topic_usage("shipping.live")
    )
    assert (
        usage is not None
        and usage.groups_listed == 2
        and usage.ends == ((0, 1200), (1, 900), (2, 1000))
    )
