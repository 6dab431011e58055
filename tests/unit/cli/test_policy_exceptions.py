"""Exceptions through the CLI: `policy check` warnings and refusals, `eval`/`test` at a given
instant, and `policy except` drafting an exception that really waives the recorded denial."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from kafka_policy_proxy.cli.policy_command import main
from kafka_policy_proxy.policy.builders import create_request
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.decision_log import Stamp, decision_record
from kafka_policy_proxy.policy.judge import ClusterFacts, judge
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.policy.model import Principal, TopicRequest

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "policy.yaml"
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
POLICY = """\
rules:
  - name: small
    partitions: {max: 10}
  - name: durable
    replication: {min: 3}
"""
EXCEPTION = """\
exceptions:
  - name: alice-migration
    match: {principals: ["User:alice"], topic_prefix: orders., actions: [create]}
    waive: [small]
    reason: orders move to 96 partitions
    ticket: OPS-42
    expires: "2026-12-05T12:00:00Z"
"""
REQUEST = """\
operation: create_topics
principal: User:alice
topics:
  - {name: orders.v2, partitions: 96, replication_factor: 3}
"""


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["policy", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_check_warns_within_warn_days_and_refuses_expired(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    policy = write(tmp_path / "policy.yaml", POLICY + EXCEPTION)
    code, out, _ = run(capsys, "check", policy, "--now", "2026-11-29T12:00:00Z")
    assert code == 0
    assert "warning: exception 'alice-migration' expires in 6.0 days (2026-12-05T12:00:00Z)" in out
    code, out, _ = run(capsys, "check", policy, "--now", "2026-11-29T12:00:00Z", "--warn-days", "5")
    assert code == 0 and "warning" not in out
    code, out, err = run(capsys, "check", policy, "--now", "2026-12-05T12:00:00Z")
    assert (code, out) == (2, "")
    assert "expired exceptions: alice-migration" in err and "--allow-expired" in err
    code, out, _ = run(capsys, "check", policy, "--now", "2026-12-05T12:00:00Z", "--allow-expired")
    assert code == 0
    assert "warning: exception 'alice-migration' expired at 2026-12-05T12:00:00Z" in out


def test_check_applies_max_days_from_now(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    policy = write(
        tmp_path / "policy.yaml", POLICY + EXCEPTION + "exception_policy: {max_days: 5}\n"
    )
    code, _, err = run(capsys, "check", policy, "--now", "2026-11-29T12:00:00Z")
    assert code == 2
    assert "exceptions[0].expires" in err and "max_days allows 5" in err
    assert run(capsys, "check", policy, "--now", "2026-12-01T12:00:00Z")[0] == 0
    with pytest.raises(SystemExit):
        main(["policy", "check", policy, "--now", "2026-12-01T12:00:00"])  # naive


def test_eval_judges_at_now(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    policy = write(tmp_path / "policy.yaml", POLICY + EXCEPTION)
    request = write(tmp_path / "request.yaml", REQUEST)
    code, out, _ = run(
        capsys, "eval", policy, "--request", request, "--now", "2026-12-05T11:59:59Z"
    )
    assert code == 0
    assert out.splitlines()[0] == "orders.v2: ALLOWED"
    waived = "by exception alice-migration (until 2026-12-05T12:00:00.000000Z, ticket OPS-42)"
    assert waived in out
    code, out, _ = run(
        capsys, "eval", policy, "--request", request, "--now", "2026-12-05T12:00:00Z", "--json"
    )
    assert code == 1
    assert "waived" not in json.loads(out)["decision"]
    code, out, _ = run(
        capsys, "eval", policy, "--request", request, "--now", "2026-12-01T00:00:00Z", "--json"
    )
    assert code == 0
    assert [w["exception"] for w in json.loads(out)["decision"]["waived"]] == ["alice-migration"]


def test_test_uses_a_case_now_else_the_flag(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    policy = write(tmp_path / "policy.yaml", POLICY + EXCEPTION)
    request = yaml.safe_load(REQUEST)
    cases = {
        "cases": [
            {
                "name": "in force",
                "now": "2026-12-05T11:59:59.999999Z",
                "request": request,
                "expect": {"orders.v2": {"allowed": True, "waived": ["small"]}},
            },
            {
                "name": "at the flag's instant",
                "request": request,
                "expect": {"orders.v2": {"allowed": False, "violations": ["small"]}},
            },
        ]
    }
    suite = write(tmp_path / "cases.yaml", yaml.safe_dump(cases))
    code, out, _ = run(capsys, "test", policy, suite, "--now", "2026-12-06T00:00:00Z")
    assert code == 0, out
    code, out, _ = run(capsys, "test", policy, suite, "--now", "2026-12-01T00:00:00Z")
    assert code == 1
    assert "orders.v2: expected denied, got allowed" in out
    naive = write(
        tmp_path / "naive.yaml",
        yaml.safe_dump({**cases, "cases": [{**cases["cases"][0], "now": "2026-12-05T11:59:59"}]}),
    )
    code, _, err = run(capsys, "test", policy, naive)
    assert code == 2 and "cases[0].now" in err


def _recorded(tmp_path: Path) -> tuple[Path, TopicRequest, str]:
    """An audit file holding one denial of a 96-partition create, and the request."""
    denying = load_policy(POLICY, "policy.yaml")
    request = create_request("orders.v2", 96, 3, principal=Principal("User:alice", "cli"))
    (verdict,) = judge(denying, [request], ClusterFacts(InMemoryCluster()), now=NOW)
    assert verdict.decision is not None and not verdict.decision.allowed
    decision_id = "0190a1b2c3d4e5f6a7b8c9d0e1f2a3b4"
    stamp = Stamp(
        time="2026-11-29T12:00:00.000000Z",
        decision_id=decision_id,
        policy_revision=denying.revision,
        cluster_id="c1",
        proxy_id="p1",
        conn=7,
        client="10.0.0.1:5000",
        api="CreateTopics",
        api_key=19,
        api_version=7,
    )
    audit = tmp_path / "audit.jsonl"
    other = decision_record(request, verdict.decision, stamp)
    lines = [
        json.dumps({**other, "decision_id": "another"}),
        "not json",
        json.dumps(decision_record(verdict.request, verdict.decision, stamp)),
    ]
    audit.write_text("\n".join(lines) + "\n")
    return audit, verdict.request, decision_id


def test_except_drafts_an_exception_that_waives_the_recorded_denial(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    audit, request, decision_id = _recorded(tmp_path)
    args = ["except", "--decision", decision_id, "--expires", "7d", "--file", str(audit)]
    args += ["--reason", "the orders migration", "--ticket", "OPS-9", "--now", NOW.isoformat()]
    code, out, _ = run(capsys, *args)
    assert code == 0, out
    policy = load_policy(POLICY + out, "policy.yaml", now=NOW)
    (exception,) = policy.document.exceptions
    assert exception.waive == ["small"]
    assert exception.match.principals == ["User:alice"]
    assert exception.expires == NOW + timedelta(days=7)
    cluster = ClusterFacts(InMemoryCluster())
    (allowed,) = judge(policy, [request], cluster, now=NOW + timedelta(days=6))
    assert allowed.decision is not None and allowed.decision.allowed
    assert [(w.rule, w.exception, w.ticket) for w in allowed.decision.waived] == [
        ("small", exception.name, "OPS-9")
    ]
    (expired,) = judge(policy, [request], cluster, now=NOW + timedelta(days=7))
    assert expired.decision is not None and not expired.decision.allowed
    # A neighbouring topic, by another principal, is not covered.
    other = create_request("orders.v22", 96, 3, principal=Principal("User:alice"))
    (neighbour,) = judge(policy, [other], cluster, now=NOW)
    assert neighbour.decision is not None and not neighbour.decision.allowed
    # --item pastes under an existing `exceptions:`.
    code, item, _ = run(capsys, *args, "--item", "--name", "second")
    assert code == 0
    both = load_policy(POLICY + EXCEPTION + item, "policy.yaml", now=NOW)
    assert [e.name for e in both.document.exceptions] == ["alice-migration", "second"]


@pytest.mark.parametrize(
    ("decision", "expires", "error"),
    [
        ("nope", "7d", "'nope' is not a decision id"),
        ("0190a1b2c3d4e5f6a7b8c9d0e1f2a3b4", "soon", "give a duration"),
        ("0190a1b2c3d4e5f6a7b8c9d0e1f2a3b4", "2026-11-01T00:00:00Z", "not in the future"),
    ],
)
def test_except_refuses_what_it_cannot_draft(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, decision: str, expires: str, error: str
) -> None:
    audit, _, _ = _recorded(tmp_path)
    code, out, err = run(
        capsys,
        "except",
        "--decision",
        decision,
        "--expires",
        expires,
        "--reason",
        "r",
        "--file",
        str(audit),
        "--now",
        NOW.isoformat(),
    )
    assert (code, out) == (2, "")
    assert error in err


def test_the_example_exception_outlives_the_example_for_years() -> None:
    # The example is checked at fixed instants; this says when it needs renewing.
    policy = load_policy(EXAMPLE.read_text(), "policy.yaml")
    assert min(e.expires for e in policy.exceptions.items) >= datetime(2030, 12, 1, tzinfo=UTC)


def test_except_says_where_it_looked_for_a_decision_it_cannot_find(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    audit, _, _ = _recorded(tmp_path)
    missing = "01a20194-3a03-779b-923b-43ebbcbe7997"
    code, out, err = run(
        capsys, "except", "--decision", missing, "--expires", "7d", "--reason", "r",
        "--file", str(audit),
    )  # fmt: skip
    assert (code, out) == (1, "")
    assert f"no record with decision id {missing}; looked in: {audit}" in err
