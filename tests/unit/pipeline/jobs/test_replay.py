"""The replay job: the recorded policy flips nothing; stricter and looser ones flip exactly what
they should; cluster facts the events lack give `unknown`; bad input is counted, never dropped.
(One request judged again, without Spark: test_replayer.py.)"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyspark.sql import SparkSession

from harness.audit_data import (
    admin_events,
    broker_config_events,
    example_cluster,
    write_events,
    write_snapshot,
)
from harness.java_policies import REFERENCE_CLASS, build_jar, kafka_clients_jar
from kafka_policy_proxy.pipeline.jobs.replay import run_replay
from kafka_policy_proxy.pipeline.jobs.replay_summary import replay_facts
from kafka_policy_proxy.pipeline.jobs.replayer import ALL_TOPICS_NOT_RECORDED
from kafka_policy_proxy.pipeline.sources.snapshots import SnapshotError
from kafka_policy_proxy.policy.budgets import needs as budget_needs
from kafka_policy_proxy.policy.loader import PolicyError, load_policy
from kafka_policy_proxy.policy.model import Fact, TopicRequest
from tests.unit.pipeline.jobs.replay_inputs import (
    ALICE_THREADS,
    ALLOWED,
    CLUSTER_WIDE,
    EVENTS,
    EXAMPLE,
    LONG_RETENTION,
    candidate,
    decisions,
    enforced,
    grant_alice_threads,
    key,
)


def test_the_recorded_policy_flips_nothing_with_a_snapshot(
    spark: SparkSession, audit: Path, snapshot: Path, events: list[dict[str, Any]], tmp_path: Path
) -> None:
    summary = run_replay(spark, str(EXAMPLE), [str(audit)], str(tmp_path), [str(snapshot)])
    rows = decisions(spark, tmp_path)
    assert len(rows) == EVENTS
    actions = set()
    for event in events:
        row = rows[key(event)]
        actions.add((event["action"], event["request"]["alter_kind"]))
        assert row["new_decision"] == row["old_decision"] == event["decision"], event
        assert row["new_rules"] == row["old_rules"] == [v["rule"] for v in event["violations"]]
        assert row["new_messages"] == [v["message"] for v in event["violations"]]
        assert row["flip"] == "none"
        assert row["flip_rules"] == []
    # Every action the generator makes, each with a cluster-wide rule somewhere in the policy.
    assert len(actions) == 6
    assert summary["snapshot"] == {"paths": [str(snapshot)], "cluster_id": "example"}
    assert summary["requests"] == summary["unchanged"] == EVENTS
    assert summary["allow_to_deny"] == summary["deny_to_allow"] == summary["unknown"] == 0
    assert json.loads((tmp_path / "summary.json").read_text()) == summary


def test_without_a_snapshot_exactly_the_requests_needing_cluster_facts_are_unknown(
    spark: SparkSession, audit: Path, events: list[dict[str, Any]], tmp_path: Path
) -> None:
    policy = load_policy(EXAMPLE.read_text(), str(EXAMPLE))
    summary = run_replay(spark, str(EXAMPLE), [str(audit)], str(tmp_path))
    rows = decisions(spark, tmp_path)
    unknown = Counter()
    for event in events:
        request = TopicRequest.from_dict(event["request"])
        needs = policy.needs(request) | budget_needs(policy.budgets, request)
        # The events were judged by this policy, so it fetched every fact it needed: only the
        # cluster-wide ones (never recorded) are missing, or a topic state it did not find.
        lacking = needs & CLUSTER_WIDE
        if Fact.TOPIC_STATE in needs and request.current is None and event["action"] != "create":
            lacking.add(Fact.TOPIC_STATE)
        row = rows[key(event)]
        if lacking:
            names = ", ".join(sorted(f.value for f in lacking))
            assert row["new_decision"] == row["flip"] == "unknown", event
            assert row["reason"] == f"needs cluster facts: {names}; pass --snapshot"
            assert row["new_rules"] == []
            unknown[event["action"], event["request"]["alter_kind"]] += 1
        else:
            assert row["new_decision"] == event["decision"], event
            assert row["new_rules"] == [v["rule"] for v in event["violations"]]
            assert row["flip"] == "none"
    # metric-name-collision and partition-budget read cluster-wide facts.
    assert set(unknown) == {("create", None), ("alter", "partitions")}
    assert summary["unknown"] == sum(unknown.values())
    assert summary["unchanged"] == EVENTS - summary["unknown"]
    assert summary["allow_to_deny"] == summary["deny_to_allow"] == summary["errors"] == 0
    assert sum(summary["unknown_reasons"].values()) == summary["unknown"]


def test_a_stricter_policy_flips_exactly_what_its_rule_catches(
    spark: SparkSession, audit: Path, snapshot: Path, events: list[dict[str, Any]], tmp_path: Path
) -> None:
    def lower_partition_max(document: dict[str, Any]) -> None:
        rule = next(r for r in document["rules"] if r["name"] == "partition-count")
        rule["partitions"]["max"] = 12

    policy = candidate(tmp_path, "stricter.yaml", lower_partition_max)
    summary = run_replay(spark, str(policy), [str(audit)], str(tmp_path / "out"), [str(snapshot)])
    rows = decisions(spark, tmp_path / "out")
    expected = set()
    for event in events:
        request = event["request"]
        partitions = request["requested"]["partitions"]
        if (
            event["decision"] in ALLOWED
            and event["principal"] != "User:platform-admin"
            and (event["action"] == "create" or request["alter_kind"] == "partitions")
            and partitions is not None
            and 12 < partitions <= 48
        ):
            expected.add(key(event))
    flipped = {k for k, r in rows.items() if r["flip"] == "allow->deny"}
    # Partition increases: the generator creates with 12 or 64 at most.
    assert expected, "no allowed request asks for 13 to 48 partitions: nothing to flip"
    assert flipped == expected
    for k in flipped:
        assert rows[k]["flip_rules"] == ["partition-count"]
        assert rows[k]["new_decision"] == "denied"
        assert any("the limit is 12" in m for m in rows[k]["new_messages"]), rows[k]
    assert {r["flip"] for k, r in rows.items() if k not in flipped} == {"none"}
    assert summary["allow_to_deny"] == len(expected)
    assert summary["deny_to_allow"] == summary["unknown"] == 0
    flips = spark.read.parquet(str(tmp_path / "out" / "flips")).collect()
    by_principal = Counter(rows[k]["principal"] for k in expected)
    assert {(r["flip"], r["rule"], r["principal"]): r["requests"] for r in flips} == {
        ("allow->deny", "partition-count", p): n for p, n in by_principal.items()
    }
    html = (tmp_path / "out" / "replay.html").read_text()
    # The share that would flip comes first, then who and what is most affected.
    share = f"{100 * len(expected) / summary['requests']:.1f}%"
    assert html.index("<dt>would flip</dt>") < html.index("<dt>requests</dt>")
    assert f"<dt>would flip</dt><dd>{share}</dd>" in html
    order = ["Most affected topics", "Most affected principals", "Most affected rules", "sample"]
    at = [html.index(title) for title in order]
    assert at == sorted(at)
    top_principal, top_count = by_principal.most_common(1)[0]
    assert f"<td>{top_principal}</td><td>{top_count:,}</td>" in html
    sample = html[html.index("A sample of flipped") :].split("</table>")[0]
    # One row per principal, flip, resource and rules behind it: the header and 10 at most.
    broken = [e for e in events if key(e) in expected]
    resources = {(e["principal"], e["resource_type"], e["resource"]) for e in broken}
    assert sample.count("<tr>") == 1 + min(10, len(resources))
    assert re.search(r"<td>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</td>", sample), sample[:2000]
    # Distinct requests (the same ask of the same resource), principals, topics, client ids.
    asks = {
        (e["principal"], e["client_id"], e["api"], e["action"], e["resource"], e["validate_only"])
        for e in broken
    }
    assert summary["distinct"]["allow->deny"] == {
        "requests": len(asks),
        "principals": len(by_principal),
        "topics": len({e["topic"] for e in broken}),
        "client_ids": len({e["client_id"] for e in broken}),
    }
    nothing = {"requests": 0, "principals": 0, "topics": 0, "client_ids": 0}
    assert summary["distinct"]["deny->allow"] == nothing
    assert summary["cache"]["lookups"] == summary["requests"] >= summary["cache"]["hits"]
    counts = {"requests": summary["requests"], "cache_hits": summary["cache"]["hits"]}
    written = spark.read.parquet(str(tmp_path / "out" / "decisions"))
    facts = replay_facts(spark, written, summary["outputs"], counts)
    apps = Counter((e["client_id"], e["principal"]) for e in broken)
    top = sorted(apps.items(), key=lambda item: (-item[1], item[0]))[:10]
    assert [((c["client_id"], c["principal"]), c["requests"]) for c in facts["clients"]] == top
    assert all(c["rules"] == ["partition-count"] for c in facts["clients"])
    assert all("the limit is 12" in c["example"] for c in facts["clients"])
    assert "allow-&gt;deny flips by rule" in html
    assert "data:image/png;base64," in html
    pngs = sorted(p.name for p in (tmp_path / "out").glob("*.png"))
    assert pngs == ["replay-1-allow-deny-flips-by-rule.png"]


def test_a_looser_policy_flips_exactly_what_the_removed_rule_denied(
    spark: SparkSession, audit: Path, snapshot: Path, events: list[dict[str, Any]], tmp_path: Path
) -> None:
    def drop_naming(document: dict[str, Any]) -> None:
        document["rules"] = [r for r in document["rules"] if r["name"] != "topic-naming"]

    policy = candidate(tmp_path, "looser.yaml", drop_naming)
    summary = run_replay(spark, str(policy), [str(audit)], str(tmp_path / "out"), [str(snapshot)])
    rows = decisions(spark, tmp_path / "out")
    expected = {
        key(e) for e in events if e["decision"] == "denied" and set(enforced(e)) == {"topic-naming"}
    }
    assert expected, "no event is denied by topic-naming alone: nothing to flip"
    flipped = {k for k, r in rows.items() if r["flip"] == "deny->allow"}
    assert flipped == expected
    assert {r["flip"] for k, r in rows.items() if k not in flipped} == {"none"}
    # Flip counts: a pure-Python count over the decisions, by rule and principal.
    counted: Counter[tuple[str, str, str]] = Counter()
    for event in events:
        if key(event) in expected:
            for rule in enforced(event):
                counted["deny->allow", rule, event["principal"]] += 1
    flips = spark.read.parquet(str(tmp_path / "out" / "flips")).collect()
    assert {(r["flip"], r["rule"], r["principal"]): r["requests"] for r in flips} == counted
    assert summary["deny_to_allow"] == len(expected)
    assert summary["allow_to_deny"] == 0


def test_bad_lines_are_counted_and_corrupt_requests_become_errors(
    spark: SparkSession, events: list[dict[str, Any]], tmp_path: Path
) -> None:
    good = events[:20]
    corrupt = [
        good[0] | {"request": {"topic": "x"}},  # no action
        good[1] | {"request": {**good[1]["request"], "action": "explode"}},
        good[2] | {"request": {**good[2]["request"], "requested": {"changes": "oops"}}},
    ]
    lines = [json.dumps(e) for e in good[3:]] + [json.dumps(e) for e in corrupt]
    lines += ["not json", json.dumps(good[4])[:-9], json.dumps(good[5] | {"schema": 9})]
    (tmp_path / "audit").mkdir()
    (tmp_path / "audit" / "a.jsonl").write_text("\n".join(lines) + "\n")
    summary = run_replay(spark, str(EXAMPLE), [str(tmp_path / "audit")], str(tmp_path / "out"))
    assert summary["requests"] == 20
    assert summary["errors"] == 3
    assert (summary["lines"]["malformed"], summary["lines"]["unknown_version"]) == (2, 1)
    rows = spark.read.parquet(str(tmp_path / "out" / "decisions")).where("flip = 'error'")
    reasons = sorted(r["reason"] for r in rows.collect())
    assert [r.split(":")[0] for r in reasons] == ["cannot replay"] * 3
    assert any("KeyError: 'action'" in r for r in reasons)
    assert any("'explode' is not a valid Action" in r for r in reasons)
    bad = spark.read.parquet(str(tmp_path / "out" / "bad_lines")).collect()
    assert {(r["kind"], r["problem"]): r["lines"] for r in bad} == {
        ("malformed", "not valid JSON"): 2,
        ("unknown_version", "schema version 9"): 1,
    }
    assert all(r["source"].endswith("a.jsonl") for r in bad)


def test_a_bad_policy_is_refused_before_any_spark_work(spark: SparkSession, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nrules:\n  - name: x\n    partitions: {max: many}\n")
    # The audit path does not exist: reading it would fail differently.
    with pytest.raises(PolicyError, match=r"bad\.yaml"):
        run_replay(spark, str(bad), [str(tmp_path / "missing")], str(tmp_path / "out"))


def test_several_snapshots_are_refused(spark: SparkSession, audit: Path, tmp_path: Path) -> None:
    write_snapshot(tmp_path / "a.jsonl", example_cluster(3), "A")
    write_snapshot(tmp_path / "b.jsonl", example_cluster(3), "B")
    with pytest.raises(SnapshotError, match="exactly one snapshot"):
        run_replay(spark, str(EXAMPLE), [str(audit)], str(tmp_path / "out"), [str(tmp_path)])
    # One cluster twice (say, a week apart) would count every topic twice: refused too.
    write_snapshot(tmp_path / "b.jsonl", example_cluster(3), "A")
    with pytest.raises(SnapshotError, match=r"A \(.*a\.jsonl\), A \(.*b\.jsonl\)"):
        run_replay(spark, str(EXAMPLE), [str(audit)], str(tmp_path / "out"), [str(tmp_path)])


def test_records_of_no_topic_are_replayed_by_the_candidates_admin_apis_and_broker_configs(
    spark: SparkSession, events: list[dict[str, Any]], tmp_path: Path
) -> None:
    recorded = load_policy("version: 1\nrules: [{name: r, partitions: {max: 9}}]\n")
    calls = [("CreateAcls", "User:ops"), ("ElectLeaders", "User:ops"), ("CreateAcls", "User:x")]
    admin = list(admin_events(recorded, calls))
    assert [e["decision"] for e in admin] == ["denied"] * 3
    example = load_policy(EXAMPLE.read_text(), str(EXAMPLE))
    configs = list(
        broker_config_events(example, [ALICE_THREADS, LONG_RETENTION], example_cluster())
    )
    assert [e["decision"] for e in configs] == ["denied"] * 2

    def edit(document: dict[str, Any]) -> None:
        document["admin_apis"] = [
            {"name": "ops", "principals": ["User:ops"], "apis": ["CreateAcls"]}
        ]
        grant_alice_threads(document)

    policy = candidate(tmp_path, "candidate.yaml", edit)
    (tmp_path / "audit").mkdir()
    write_events(tmp_path / "audit" / "a.jsonl", [*events[:10], *admin, *configs])
    summary = run_replay(spark, str(policy), [str(tmp_path / "audit")], str(tmp_path / "out"))
    assert summary["requests"] == 15 and summary["errors"] == 0
    assert summary["actions"]["admin_api"] == 3 and summary["actions"]["alter_broker_config"] == 2
    # The new default needs every topic's state, which no event records: undecided, counted.
    assert summary["unknown_reasons"][ALL_TOPICS_NOT_RECORDED] == 1
    rows = spark.read.parquet(str(tmp_path / "out" / "decisions")).where("topic IS NULL")
    by_call = {(r["api"], r["principal"]): r for r in rows.collect()}
    assert len(by_call) == 5
    assert by_call[("CreateAcls", "User:ops")]["flip"] == "deny->allow"
    assert by_call[("ElectLeaders", "User:ops")]["new_rules"] == ["admin-apis"]
    assert by_call[("CreateAcls", "User:x")]["flip"] == "none"
    threads = by_call[("IncrementalAlterConfigs", "User:alice")]
    assert (threads["resource_type"], threads["resource"], threads["flip"]) == (
        "broker",
        "1",
        "deny->allow",
    )
    assert threads["flip_rules"] == ["broker-configs"]
    retention = by_call[("IncrementalAlterConfigs", "User:platform-admin")]
    assert (retention["resource_type"], retention["resource"]) == ("cluster", "")
    assert (retention["new_decision"], retention["reason"]) == ("unknown", ALL_TOPICS_NOT_RECORDED)


def test_a_java_policy_is_replayed_in_the_spark_workers(
    spark: SparkSession, audit: Path, snapshot: Path, events: list[dict[str, Any]], tmp_path: Path
) -> None:
    build_jar(tmp_path / "reference-policy.jar")
    java_rule = {
        "name": "broker-policy",
        "java_policy": {
            "jar": "reference-policy.jar",  # read beside the policy file, by every worker
            "class": REFERENCE_CLASS,
            "classpath": [str(kafka_clients_jar())],
        },
    }
    policy = candidate(tmp_path, "with-java.yaml", lambda d: d["rules"].append(java_rule))
    summary = run_replay(spark, str(policy), [str(audit)], str(tmp_path / "out"), [str(snapshot)])
    rows = decisions(spark, tmp_path / "out")
    # The oracle: the same jar evaluated in this process, on what each event recorded.
    alone = load_policy(
        yaml.safe_dump({"version": 1, "rules": [java_rule]}), "alone.yaml", base_dir=tmp_path
    )
    cluster = example_cluster()
    try:
        expected = {}
        for event in events:
            request = TopicRequest.from_dict(event["request"])
            if event["action"] == "create" or request.alter_kind is not None:
                expected[key(event)] = alone.evaluate(request, cluster).message
    finally:
        alone.close()
    messages = Counter(bool(m) for m in expected.values())
    assert messages[True] and messages[False], f"the jar should deny some, not all: {messages}"
    for k, message in expected.items():
        java = [
            m
            for r, m in zip(rows[k]["new_rules"], rows[k]["new_messages"], strict=True)
            if r == "broker-policy"
        ]
        assert java == ([message] if message else []), k
    assert summary["allow_to_deny"] == sum(
        1 for e in events if e["decision"] in ALLOWED and expected.get(key(e))
    )
