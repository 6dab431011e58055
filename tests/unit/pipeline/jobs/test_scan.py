"""The scan job: every existing topic judged as if created now, in the cluster of the others."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from kafka_policy_proxy.pipeline.jobs.scan import run_scan
from kafka_policy_proxy.pipeline.sources.snapshots import SnapshotError
from kafka_policy_proxy.policy.builders import create_request
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.loader import PolicyError, load_policy
from kafka_policy_proxy.policy.model import Principal, TopicState
from kafka_policy_proxy.policy.overlays import OtherTopics
from tests.unit.pipeline.jobs.scan_inputs import (
    EMPTY,
    EXAMPLE_POLICY,
    EXPECTED_RULES,
    PROD,
    SMALL_POLICY,
    STAGING,
    Cluster,
    Topic,
    engine_violations,
    snapshot_lines,
    table,
    violation_rows,
    write_snapshots,
)


@pytest.mark.parametrize("principal", ["User:ANONYMOUS", "User:platform-admin"])
def test_example_policy_violations_match_the_engine(
    spark: SparkSession, tmp_path: Path, principal: str
) -> None:
    paths = write_snapshots(tmp_path / "snapshots", [PROD, STAGING, EMPTY])
    out = tmp_path / "out"
    summary = run_scan(spark, str(EXAMPLE_POLICY), paths, str(out), principal=principal)

    expected = engine_violations(EXAMPLE_POLICY.read_text(), [PROD, STAGING, EMPTY], principal)
    assert violation_rows(spark, out) == expected
    topics = {(r["cluster_id"], r["topic"]): r for r in table(spark, out, "topics")}
    assert set(topics) == set(EXPECTED_RULES)
    if principal == "User:ANONYMOUS":
        assert {k: r["rules"] for k, r in topics.items()} == EXPECTED_RULES
        assert topics["prod", "orders.v1"]["decision"] == "compliant"
        assert topics["prod", "events.views"]["decision"] == "audit-only"
        assert topics["prod", "billing_v1"]["decision"] == "violating"
        messages = {(c, t, rule): m for c, t, rule, _, m in expected}
        assert (
            "sets retention.ms to 7776000000 (90d)"
            in messages["prod", "metrics.raw", "retention-bounds"]
        )
        assert (
            "gets the broker default min.insync.replicas = 1"
            in messages["staging", "staging.orders", "durability"]
        )
        assert (
            "collides with existing topic 'billing_v1'"
            in (messages["prod", "billing.v1", "metric-name-collision"])
        )
    else:
        # The platform team is exempt from naming, partition count and replication.
        exempt = {"topic-naming", "partition-count", "replication"}
        flagged = {k: r["rules"] for k, r in topics.items() if exempt & set(r["rules"])}
        assert flagged == {}
    assert topics["prod", "payments.refunds"]["partitions"] == 1
    assert topics["prod", "logs.audit"]["replication_factor"] == 2

    clusters = {r["cluster_id"]: r for r in table(spark, out, "clusters")}
    assert clusters["prod"]["topics"] == 11
    assert clusters["prod"]["skipped_internal"] == 1
    assert clusters["prod"]["brokers"] == 3
    assert clusters["empty"] == {
        "cluster_id": "empty",
        "brokers": 3,
        "topics": 0,
        "compliant": 0,
        "violating": 0,
        "audit_only": 0,
        "skipped_internal": 0,
        "violations": 0,
    }
    decisions = [r["decision"] for r in topics.values()]
    assert summary["topics"] == 13
    assert summary["violations"] == len(expected)
    assert summary["violating"] == decisions.count("violating")
    assert summary["audit_only"] == decisions.count("audit-only")
    assert summary["compliant"] == decisions.count("compliant")
    assert summary["skipped_internal"] == 1
    assert summary["principal"] == principal
    assert sum(summary["violations_by_rule"].values()) == len(expected)
    assert json.loads((out / "summary.json").read_text()) == summary
    html = (out / "scan.html").read_text()
    assert principal in html
    assert "metrics.raw" in html
    assert "data:image/png;base64," in html
    assert_team_reports(out, summary, topics, table(spark, out, "violations"))
    if principal == "User:ANONYMOUS":
        teams = {t["team"]: t for t in json.loads((out / "teams.json").read_text())["teams"]}
        assert list(teams) == ["payments", "data-eng", "platform", "developers", "(unowned)"]
        assert teams["platform"]["summary"] == {
            "pass": 0, "fail": 3, "warn": 0, "error": 0, "skip": 1
        }  # fmt: skip
        assert teams["data-eng"]["summary"] == {
            "pass": 0, "fail": 2, "warn": 1, "error": 0, "skip": 0
        }  # fmt: skip
        assert teams["(unowned)"]["html"] == "teams/_unowned/report.html"
        page = (out / "teams" / "data-eng" / "report.html").read_text()
        assert "Policy report: data-eng" in page
        assert "topic &#x27;events.views&#x27; sets segment.ms" in page
        assert "orders.v1" not in page


def assert_team_reports(
    out: Path, summary: dict[str, Any], topics: dict[tuple[str, str], Any], violations: list[Any]
) -> None:
    """Each team's report lists only its own topics, and the teams add up to the whole."""
    index = json.loads((out / "teams.json").read_text())
    assert index["unowned"] == "(unowned)"
    assert [t["team"] for t in index["teams"]] == list(summary["teams"])
    reports = {t["team"]: json.loads((out / t["report"]).read_text()) for t in index["teams"]}
    owned = {(c, t): r["owner"] for (c, t), r in topics.items()}
    for team, report in reports.items():
        assert report["kind"] == "PolicyReport"
        assert report["summary"] == summary["teams"][team]
        assert report["topics"]["topics"] == sum(o == team for o in owned.values())
        for result in report["results"]:
            resource = result["resource"]
            assert owned[resource["cluster_id"], resource["name"]] == team
            assert (result["result"], result["severity"]) in {("fail", "high"), ("warn", "low")}
        assert len(report["results"]) == report["results_total"]
    assert owned["prod", "orders.v1"] == "(unowned)"
    assert {v["owner"] for v in violations} <= set(reports)
    counts = [r["summary"] for r in reports.values()]
    assert sum(c["pass"] for c in counts) == summary["compliant"]
    assert sum(c["fail"] + c["warn"] for c in counts) == summary["violations"]
    assert sum(c["skip"] for c in counts) == summary["skipped_internal"]
    assert sum(r["topics"]["topics"] for r in reports.values()) == summary["topics"]


def test_cluster_facts_exclude_the_topic_under_evaluation(
    spark: SparkSession, tmp_path: Path
) -> None:
    policy = tmp_path / "small.yaml"
    policy.write_text(SMALL_POLICY)
    at_limit = Cluster("at-limit", 3, {}, [Topic(f"t{i}", 4) for i in range(3)])
    over = Cluster("over", 3, {}, [Topic(f"u{i}", 3) for i in range(4)])
    crowded = Cluster("crowded", 3, {}, [Topic(f"v{i:03}", 1) for i in range(205)])
    paths = write_snapshots(tmp_path / "snapshots", [at_limit, over, crowded])
    out = tmp_path / "out"
    summary = run_scan(spark, str(policy), paths, str(out))

    expected = []
    for topic in over.topics:
        expected.append(
            ("over", topic.name, "topic-limit", "enforce",
             f"[topic-limit] topic {topic.name!r} would be topic number 4; the limit is 3 topics")
        )  # fmt: skip
    for topic in crowded.topics:
        expected.append(
            ("crowded", topic.name, "topic-limit", "enforce",
             f"[topic-limit] topic {topic.name!r} would be topic number 205; the limit is 3 "
             "topics")
        )  # fmt: skip
        expected.append(
            ("crowded", topic.name, "partition-budget", "enforce",
             f"[partition-budget] topic {topic.name!r} would bring the cluster to 205 "
             "partitions; the budget is 12")
        )  # fmt: skip
    assert violation_rows(spark, out) == sorted(expected)
    assert violation_rows(spark, out) == engine_violations(
        SMALL_POLICY, [at_limit, over, crowded], "User:ANONYMOUS"
    )
    assert summary["violations"] == 414
    assert summary["by_cluster"]["at-limit"]["compliant"] == 3
    html = (out / "scan.html").read_text()
    assert "the first 200 of 414" in html
    assert html.count("would be topic number") + html.count("would bring the cluster") == 200


def test_a_snapshot_without_config_sources_warns_and_judges_only_values(
    spark: SparkSession, tmp_path: Path
) -> None:
    directory = tmp_path / "snapshots"
    paths = write_snapshots(directory, [PROD, STAGING])
    prod = directory / "prod.jsonl"
    lines = [json.loads(line) for line in prod.read_text().splitlines()]
    for line in lines:
        line.pop("config_sources", None)
    prod.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "out"
    summary = run_scan(spark, str(EXAMPLE_POLICY), paths, str(out))

    (warning,) = summary["warnings"]
    assert warning.startswith(f"{prod.as_uri()}: 12 topic line(s) without config_sources")
    assert "`required` and `forbidden` are not judged" in warning
    topics = {(r["cluster_id"], r["topic"]): r["rules"] for r in table(spark, out, "topics")}
    # The unclean election set on events.clicks is `forbidden`: not judged without sources.
    assert topics["prod", "events.clicks"] == []
    assert topics["prod", "metrics.raw"] == ["retention-bounds"]
    messages = {(c, t, rule): m for c, t, rule, _, m in violation_rows(spark, out)}
    assert messages["prod", "metrics.raw", "retention-bounds"] == (
        "[retention-bounds] topic 'metrics.raw' has retention.ms = 7776000000 (90d); "
        "the limit is 2592000000 (30d)"
    )
    worded = [
        m
        for (c, *_), m in messages.items()
        if c == "prod" and ("broker default" in m or " sets " in m)
    ]
    assert worded == []
    # The snapshot with sources is judged as before.
    assert (
        "gets the broker default min.insync.replicas = 1"
        in (messages["staging", "staging.orders", "durability"])
    )
    assert f"Warning: {warning}." in (out / "scan.html").read_text()


def test_an_empty_cluster_gives_an_empty_report(spark: SparkSession, tmp_path: Path) -> None:
    paths = write_snapshots(tmp_path / "snapshots", [EMPTY])
    out = tmp_path / "out"
    (out / "teams" / "gone").mkdir(parents=True)
    (out / "teams" / "gone" / "report.json").write_text("{}")
    summary = run_scan(spark, str(EXAMPLE_POLICY), paths, str(out), teams=False)
    # No reports per team when told so; an earlier run's are removed.
    assert "teams" not in summary
    assert not (out / "teams").exists()
    assert not (out / "teams.json").exists()
    assert summary["clusters"] == 1
    assert summary["topics"] == summary["violations"] == 0
    assert summary["violations_by_rule"] == {}
    assert table(spark, out, "violations") == []
    assert table(spark, out, "topics") == []
    assert [r["topics"] for r in table(spark, out, "clusters")] == [0]
    assert "no topic breaks the policy" in (out / "scan.html").read_text()


@pytest.mark.parametrize(
    ("files", "problem"),
    [
        ({"prod.jsonl": snapshot_lines(PROD, declared=13)}, "the snapshot is incomplete"),
        ({"prod.jsonl": snapshot_lines(PROD)[:-1]}, "no end line"),
        (
            {"a.jsonl": snapshot_lines(STAGING), "b.jsonl": snapshot_lines(STAGING)},
            "cluster staging is in 2 snapshots",
        ),
        (
            {"mixed.jsonl": snapshot_lines(STAGING)[:1] + snapshot_lines(PROD)[1:3]
             + snapshot_lines(STAGING)[-1:]},
            "lines of 2 clusters",
        ),
        (
            # A topic twice: the clusters replay builds would keep one of the two lines.
            {"prod.jsonl": [*snapshot_lines(PROD, declared=len(PROD.topics) + 1)[:-1],
                            snapshot_lines(PROD)[1],
                            snapshot_lines(PROD, declared=len(PROD.topics) + 1)[-1]]},
            "given 2 times",
        ),
    ],
)  # fmt: skip
def test_bad_snapshots_are_refused(
    spark: SparkSession, tmp_path: Path, files: dict[str, list[str]], problem: str
) -> None:
    for name, lines in files.items():
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    with pytest.raises(SnapshotError, match=problem):
        run_scan(spark, str(EXAMPLE_POLICY), [str(tmp_path)], str(tmp_path / "out"))
    assert not (tmp_path / "out").exists(), "a refused scan wrote outputs"


def test_a_bad_policy_is_refused_naming_the_file(spark: SparkSession, tmp_path: Path) -> None:
    policy = tmp_path / "bad.yaml"
    policy.write_text("version: 1\nrules:\n  - name: x\n    partitions: {min: 0}\n")
    paths = write_snapshots(tmp_path / "snapshots", [STAGING])
    with pytest.raises(PolicyError, match=r"bad\.yaml"):
        run_scan(spark, str(policy), paths, str(tmp_path / "out"))


def test_the_collision_rule_answers_for_the_names_it_is_handed() -> None:
    """The scan hands out "every topic but this one" per topic; the collision index built for
    the first is reused for the others, and never answers for names it was not handed."""
    policy = load_policy("version: 1\nrules:\n  - name: collision\n    name_collision: true\n")

    def rules(name: str, cluster: InMemoryCluster | OtherTopics) -> list[str]:
        request = create_request(name, principal=Principal())
        return [v.rule for v in policy.evaluate(request, cluster).violations]

    full = InMemoryCluster.of([TopicState("a.b"), TopicState("a_b"), TopicState("x")])
    assert rules("x", OtherTopics(full, "x")) == []
    assert rules("a.b", OtherTopics(full, "a.b")) == ["collision"]
    assert rules("a_b", OtherTopics(full, "a_b")) == ["collision"]
    assert OtherTopics(full, "a_b").topic_names(include_internal=True) == {"a.b", "x"}
    # a_b deleted, then c_d created: fewer names reuse the index, new ones rebuild it.
    assert rules("a.b", InMemoryCluster.of([TopicState("a.b")])) == []
    assert rules("c.d", InMemoryCluster.of([TopicState("a.b"), TopicState("c_d")])) == ["collision"]
