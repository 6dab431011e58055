"""`policy test --format junit|json|tap [--output FILE]`: reports a policy repository's CI reads."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from junitparser import Failure, JUnitXml

from kafka_policy_proxy.cli.policy_command import main

ROOT = Path(__file__).resolve().parents[3]
POLICY = str(ROOT / "examples" / "policy.yaml")
EXAMPLE_CASES = ROOT / "examples" / "policy-tests.yaml"
WRONG = "wrong # expectation"
FAILING = f"""\
cases:
  - name: "{WRONG}"
    request: {{operation: create_topics, topics: [{{name: a.b, partitions: 64}}]}}
    expect: {{a.b: {{allowed: true}}, c.d: {{allowed: true}}}}
  - name: twelve partitions are allowed
    request:
      operation: create_topics
      topics: [{{name: a.b, partitions: 12, replication_factor: 3}}]
    expect: {{a.b: {{allowed: true, violations: []}}}}
"""


@pytest.fixture
def failing(tmp_path: Path) -> Path:
    path = tmp_path / "cases.yaml"
    path.write_text(FAILING)
    return path


def run(capsys: pytest.CaptureFixture[str], cases: Path, *argv: str) -> tuple[int, str]:
    code = main(["policy", "test", POLICY, str(cases), *argv])
    return code, capsys.readouterr().out


def example_case_names() -> list[str]:
    return [case["name"] for case in yaml.safe_load(EXAMPLE_CASES.read_text())["cases"]]


def test_junit_of_the_example_suite(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    report = tmp_path / "report.xml"
    code, out = run(capsys, EXAMPLE_CASES, "--format", "junit", "--output", str(report))
    assert code == 0
    assert out.endswith(f"{len(example_case_names())} passed, 0 failed\n")  # text to stdout
    xml = JUnitXml.fromfile(str(report))
    [suite] = list(xml)
    assert (suite.tests, suite.failures, suite.errors) == (len(example_case_names()), 0, 0)
    assert [case.name for case in suite] == example_case_names()
    assert all(case.is_passed and case.classname == "policy-tests" for case in suite)


def test_junit_names_a_failed_case_and_why(
    capsys: pytest.CaptureFixture[str], failing: Path
) -> None:
    code, out = run(capsys, failing, "--format", "junit")
    assert code == 1  # exit code as with the text report
    xml = JUnitXml.fromstring(out)
    [suite] = list(xml)
    assert (suite.tests, suite.failures) == (2, 1)
    wrong, fine = list(suite)
    assert wrong.name == WRONG and fine.is_passed
    [failure] = wrong.result
    assert isinstance(failure, Failure)
    assert failure.message.startswith("a.b: expected allowed, got denied; c.d: no decision")
    details = yaml.safe_load(failure.text)
    assert details["actual"]["a.b"]["violations"] == ["partition-count"]
    assert details["expected"]["c.d"] == {"allowed": True}


def test_junit_matches_the_schema_ci_systems_read(
    capsys: pytest.CaptureFixture[str], failing: Path
) -> None:
    # The elements and attributes of the JUnit XSD (Jenkins' junit-10.xsd), and no others.
    allowed = {
        "testsuites": {"name", "tests", "failures", "errors", "time"},
        "testsuite": {"name", "tests", "failures", "errors", "skipped", "time"},
        "testcase": {"name", "classname", "time"},
        "failure": {"message", "type"},
    }
    parents = {"testsuite": "testsuites", "testcase": "testsuite", "failure": "testcase"}
    _, out = run(capsys, failing, "--format", "junit")
    assert out.startswith('<?xml version="1.0" encoding="UTF-8"?>\n<testsuites ')
    xml = JUnitXml.fromstring(out)
    root = xml._elem
    seen = set()
    for parent in root.iter():
        assert set(parent.attrib) <= allowed[parent.tag], parent.tag
        seen.add(parent.tag)
        for child in parent:
            assert parents[child.tag] == parent.tag
    assert seen == set(allowed)
    for case in root.iter("testcase"):
        assert float(case.get("time", "x")) >= 0


def test_json_is_one_object_per_case(capsys: pytest.CaptureFixture[str], failing: Path) -> None:
    code, out = run(capsys, failing, "--format", "json")
    assert code == 1
    wrong, fine = json.loads(out)
    assert set(wrong) == {"name", "expected", "actual", "passed", "message"}
    assert wrong["name"] == WRONG and wrong["passed"] is False
    assert wrong["expected"] == {"a.b": {"allowed": True}, "c.d": {"allowed": True}}
    assert wrong["actual"]["a.b"]["allowed"] is False
    assert wrong["actual"]["a.b"]["violations"] == ["partition-count"]
    assert "asks for 64 partitions" in wrong["actual"]["a.b"]["messages"][0]
    assert "c.d: no decision" in wrong["message"]
    assert fine["passed"] is True and fine["message"] == ""
    assert fine["actual"] == {"a.b": {"allowed": True, "violations": [], "messages": []}}


TEST_POINT = re.compile(r"^(ok|not ok) (\d+) - (.+)$")


def parse_tap(text: str) -> list[tuple[bool, str, dict[str, object] | None]]:
    """A TAP 14 reader for what the report uses: version, plan, test points, YAML blocks."""
    lines = text.splitlines()
    assert lines[0] == "TAP version 14"
    plan = re.fullmatch(r"1\.\.(\d+)", lines[1])
    assert plan is not None
    points: list[tuple[bool, str, dict[str, object] | None]] = []
    rest = iter(lines[2:])
    for line in rest:
        if line == "  ---":
            block = []
            for inner in rest:
                if inner == "  ...":
                    break
                assert inner.startswith("  "), inner
                block.append(inner[2:])
            ok, name, _ = points[-1]
            points[-1] = (ok, name, yaml.safe_load("\n".join(block)))
            continue
        match = TEST_POINT.match(line)
        assert match is not None, line
        assert int(match[2]) == len(points) + 1
        name = re.sub(r"\\(.)", r"\1", match[3])
        assert "#" not in re.sub(r"\\.", "", match[3])  # a bare # would be a directive
        points.append((match[1] == "ok", name, None))
    assert len(points) == int(plan[1])
    return points


def test_tap_14(capsys: pytest.CaptureFixture[str], failing: Path, tmp_path: Path) -> None:
    report = tmp_path / "report.tap"
    code, out = run(capsys, failing, "--format", "tap", "--output", str(report))
    assert code == 1
    assert "FAIL  wrong # expectation" in out  # the text report, for the CI log
    (wrong_ok, wrong, block), (fine_ok, fine, fine_block) = parse_tap(report.read_text())
    assert (wrong_ok, wrong) == (False, WRONG)
    assert (fine_ok, fine, fine_block) == (True, "twelve partitions are allowed", None)
    assert block is not None and block["severity"] == "fail"
    assert str(block["message"]).startswith("a.b: expected allowed, got denied")
    assert block["actual"] == {
        "a.b": {
            "allowed": False,
            "violations": ["partition-count"],
            "messages": ["[partition-count] topic 'a.b' asks for 64 partitions; the limit is 48"],
        }
    }


def test_tap_of_the_example_suite(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, EXAMPLE_CASES, "--format", "tap")
    assert code == 0
    assert [(ok, name) for ok, name, _ in parse_tap(out)] == [
        (True, name) for name in example_case_names()
    ]


def test_an_unwritable_output_is_exit_2(
    capsys: pytest.CaptureFixture[str], failing: Path, tmp_path: Path
) -> None:
    target = tmp_path / "missing" / "report.xml"
    code = main(
        ["policy", "test", POLICY, str(failing), "--format", "junit", "--output", str(target)]
    )
    assert code == 2
    assert f"{target}: cannot write" in capsys.readouterr().err


def test_json_of_the_example_suite(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, EXAMPLE_CASES, "--format", "json")
    assert code == 0
    cases = json.loads(out)
    assert [case["name"] for case in cases] == example_case_names()
    assert all(case["passed"] and case["message"] == "" for case in cases)
