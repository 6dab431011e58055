"""`policy check|eval|test|schema`: exit codes and output, through the CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy.policy_cli import main

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["policy", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_check_accepts_the_example(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", str(EXAMPLES / "policy.yaml"))
    assert code == 0
    assert "OK (15 rules, 0 plugins)" in out


def test_check_refuses_a_bad_file_with_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  - name: r\n    configs:\n      retention.ms: {max: 7x}\n")
    code, _, err = run(capsys, "check", str(bad))
    assert code == 2
    assert 'rules[0].configs."retention.ms".max' in err
    assert run(capsys, "check", str(tmp_path / "missing.yaml"))[0] == 2


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
