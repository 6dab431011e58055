"""`policy check|eval|test|schema`: exit codes and output, through the CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kafka_policy_proxy.cli.policy_command import main

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["policy", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_check_accepts_the_example(capsys: pytest.CaptureFixture[str]) -> None:
    # At a fixed instant: the example's exception expires one day (see test_policy_exceptions).
    code, out, _ = run(
        capsys, "check", str(EXAMPLES / "policy.yaml"), "--now", "2026-11-29T00:00:00Z"
    )
    assert code == 0
    assert (
        "OK (16 rules, 0 plugins, 0 admin_apis rules, 2 broker_configs rules, 1 exceptions)" in out
    )


def test_check_refuses_a_bad_file_with_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  - name: r\n    configs:\n      retention.ms: {max: 7x}\n")
    code, _, err = run(capsys, "check", str(bad))
    assert code == 2
    assert 'rules[0].configs."retention.ms".max' in err
    assert run(capsys, "check", str(tmp_path / "missing.yaml"))[0] == 2


@pytest.mark.parametrize(
    "text", ["", "version: 1\nrules: []\n", "dry_run: true\nrules: [{name: a, deny: true}]\n"]
)
def test_check_refuses_a_policy_that_enforces_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    code, out, err = run(capsys, "check", str(path))
    assert (code, out) == (2, "")
    assert "enforces nothing" in err and "set `enforce: nothing` at the top level" in err
    path.write_text("enforce: nothing\n" + text)
    code, out, _ = run(capsys, "check", str(path))
    assert code == 0 and "enforces nothing)" in out


def test_eval_exit_code_and_messages(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "eval",
        str(EXAMPLES / "policy.yaml"),
        "--request",
        str(EXAMPLES / "requests/create-orders.yaml"),
        "--cluster",
        str(EXAMPLES / "requests/cluster.yaml"),
    )
    assert code == 1
    assert "orders.v2: DENIED" in out
    assert "[partition-count] topic 'orders.v2' asks for 64 partitions; the limit is 48" in out
    assert "collides with existing topic 'orders.v1'" in out


def test_eval_allowed_is_exit_0_and_json_round_trips(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    request = tmp_path / "req.yaml"
    request.write_text(
        "operation: create_topics\nprincipal: User:alice\n"
        "topics: [{name: shipping.events, partitions: 6, replication_factor: 3}]\n"
    )
    code, out, _ = run(
        capsys,
        "eval",
        str(EXAMPLES / "policy.yaml"),
        "--request",
        str(request),
        "--cluster",
        str(EXAMPLES / "requests/cluster.yaml"),
        "--json",
    )
    assert code == 0
    record = json.loads(out)
    assert record["decision"]["allowed"] is True
    assert record["request"]["requested"]["configs"]["min.insync.replicas"] == "2"


def test_eval_refuses_a_bad_request_naming_the_path(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    request = tmp_path / "req.yaml"
    request.write_text("operation: create_topics\ntopics: [{name: x, partitions: many}]\n")
    code, _, err = run(capsys, "eval", str(EXAMPLES / "policy.yaml"), "--request", str(request))
    assert code == 2
    assert "invalid request" in err and "topics[0].partitions" in err


def test_the_example_suite_passes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "test", str(EXAMPLES / "policy.yaml"), str(EXAMPLES / "policy-tests.yaml")
    )
    assert code == 0, out
    assert "0 failed" in out


def test_a_failing_case_is_exit_1_and_says_why(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cases = tmp_path / "cases.yaml"
    cases.write_text(
        "cases:\n"
        "  - name: wrong expectation\n"
        "    request: {operation: create_topics, topics: [{name: a.b, partitions: 64}]}\n"
        "    expect: {a.b: {allowed: true}, c.d: {allowed: true}}\n"
    )
    code, out, _ = run(capsys, "test", str(EXAMPLES / "policy.yaml"), str(cases))
    assert code == 1
    assert "FAIL  wrong expectation" in out
    assert "a.b: expected allowed, got denied" in out
    assert "c.d: no decision" in out


def test_schema_prints_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "schema")
    assert code == 0
    assert json.loads(out)["title"] == "kafka-policy-proxy policy"


def _eval(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, request: str, *options: str
) -> tuple[int, str, str]:
    path = tmp_path / "req.yaml"
    path.write_text(request)
    return run(capsys, "eval", str(EXAMPLES / "policy.yaml"), "--request", str(path), *options)


def test_eval_answers_an_incremental_alter_of_a_topic_missing_from_the_cluster_as_the_broker(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The proxy answers UNKNOWN_TOPIC_OR_PARTITION, as the broker would: the policy needs the
    # topic's current state, and there is none. Not a policy denial, so exit 0.
    # `policy eval` used to allow it, judging without that state.
    request = (
        "operation: incremental_alter_configs\nprincipal: User:alice\n"
        "topics: [{name: orders.v9, changes: [{name: retention.ms, op: SET, value: 86400000}]}]\n"
    )
    cluster = ("--cluster", str(EXAMPLES / "requests/cluster.yaml"))
    code, out, _ = _eval(capsys, tmp_path, request, *cluster)
    assert code == 0
    assert out == (
        "orders.v9: UNKNOWN TOPIC, answered UNKNOWN_TOPIC_OR_PARTITION ([unknown-topic] topic "
        "'orders.v9' does not exist (not in the cluster metadata the proxy read))\n"
    )
    code, out, _ = _eval(capsys, tmp_path, request, *cluster, "--json")
    (record,) = [json.loads(line) for line in out.splitlines()]
    assert record["decision"]["violations"][0]["rule"] == "unknown-topic"
    # The same change to a topic the cluster has is judged by the rules, and allowed.
    code, out, _ = _eval(capsys, tmp_path, request.replace("orders.v9", "orders.v1"), *cluster)
    assert (code, out) == (0, "orders.v1: ALLOWED\n")


def test_eval_takes_a_snapshot_file_as_the_cluster(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    lines = [
        {"kind": "cluster", "schema": 1, "cluster_id": "C", "brokers": [{"id": 1}] * 3,
         "defaults": {"min.insync.replicas": "2", "retention.ms": "604800000"}},
        {"kind": "topic", "cluster_id": "C", "name": "orders_v2", "partitions": 3,
         "replication_factor": 3, "configs": {}},
        {"kind": "end", "cluster_id": "C", "topics": 1},
    ]  # fmt: skip
    snapshot = tmp_path / "snapshot.jsonl"
    snapshot.write_text("".join(json.dumps(line) + "\n" for line in lines))
    request = (
        "operation: create_topics\nprincipal: User:alice\n"
        "topics: [{name: orders.v2, partitions: 6, replication_factor: 3}]\n"
    )
    code, out, _ = _eval(capsys, tmp_path, request, "--cluster", str(snapshot))
    assert code == 1
    assert "collides with existing topic 'orders_v2'" in out
    snapshot.write_text("".join(json.dumps(line) + "\n" for line in lines[:2]))
    code, _, err = _eval(capsys, tmp_path, request, "--cluster", str(snapshot))
    assert code == 2
    assert "not a usable snapshot: no end line" in err


def test_eval_auto_create_judges_only_the_topics_that_do_not_exist(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    request = "operation: auto_create\ntopics: [{name: orders.v1}, {name: Bad_Name}]\n"
    cluster = ("--cluster", str(EXAMPLES / "requests/cluster.yaml"))
    code, out, _ = _eval(capsys, tmp_path, request, *cluster)
    assert code == 1
    assert out.startswith("Bad_Name: DENIED")
    assert "orders.v1" not in out  # it exists: the broker would not create it


def test_eval_leaves_an_unknown_topic_id_to_the_broker(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    request = (
        "operation: delete_topics\ntopics: [{topic_id: 00000000-0000-4000-8000-000000000001}]\n"
    )
    code, out, _ = _eval(capsys, tmp_path, request, "--json")
    assert code == 0
    record = json.loads(out)
    assert record["decision"] is None
    assert "names no known topic" in record["reason"]


def test_eval_shows_what_an_override_rewrote(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "version: 1\nrules:\n  - name: width\n    partitions: {max: 12, cap: true}\n"
        "  - name: isr\n    configs: {min.insync.replicas: {default: 2}}\n"
    )
    request = tmp_path / "req.yaml"
    request.write_text(
        "operation: create_topics\nprincipal: User:alice\n"
        "topics: [{name: orders.v2, partitions: 64, replication_factor: 3}]\n"
    )
    code, out, _ = run(capsys, "eval", str(policy), "--request", str(request))
    assert code == 0
    assert out == (
        "orders.v2: ALLOWED\n"
        "  rewritten by width (cap): partitions 64 -> 12\n"
        "  rewritten by isr (default): min.insync.replicas (not set) -> 2\n"
    )
    code, out, _ = run(capsys, "eval", str(policy), "--request", str(request), "--json")
    record = json.loads(out)
    assert record["request"]["requested"]["partitions"] == 64
    assert record["rewritten"]["requested"]["partitions"] == 12
    assert [o["rule"] for o in record["decision"]["overrides"]] == ["width", "isr"]
