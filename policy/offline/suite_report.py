"""`policy test`'s reports for CI systems: JUnit XML, JSON and TAP version 14.

Each shows every case with its name, whether it passed, and on a failure why, with what the
case expected and what the policy decided, per topic or other config resource.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any

import yaml

from kafka_policy_proxy.policy.broker_configs import BrokerConfigDecision
from kafka_policy_proxy.policy.model import Decision
from kafka_policy_proxy.policy.offline.scenario import resource_key
from kafka_policy_proxy.policy.offline.suite import CaseResult

FORMATS = ("text", "junit", "json", "tap")


def case_record(result: CaseResult) -> dict[str, Any]:
    """One case as data: name, expected, actual, passed, message (empty when it passed)."""
    judged: list[tuple[str, Decision | BrokerConfigDecision]] = [
        (d.topic, d) for d in result.decisions
    ]
    judged += [(resource_key(r.request), r) for r in result.resources]
    return {
        "name": result.name,
        "expected": {
            key: expectation.model_dump(exclude_none=True)
            for key, expectation in result.expected.items()
        },
        "actual": {
            key: {
                "allowed": decision.allowed,
                "violations": [v.rule for v in decision.violations],
                "messages": [v.message for v in decision.violations],
            }
            for key, decision in judged
        },
        "passed": result.passed,
        "message": "; ".join(result.failures),
    }


def json_report(results: Sequence[CaseResult]) -> str:
    """A JSON array with one object per case."""
    return json.dumps([case_record(r) for r in results], indent=2) + "\n"


def junit_report(results: Sequence[CaseResult], suite: str) -> str:
    """JUnit XML: one testsuite (the cases file) with one testcase per case."""
    failed = sum(not r.passed for r in results)
    seconds = f"{sum(r.seconds for r in results):.3f}"
    counts = {"tests": str(len(results)), "failures": str(failed), "errors": "0"}
    root = ET.Element("testsuites", {"name": "kafka-policy-proxy policy test", **counts})
    root.set("time", seconds)
    element = ET.SubElement(
        root, "testsuite", {"name": suite, **counts, "skipped": "0", "time": seconds}
    )
    classname = suite.rsplit("/", 1)[-1].rsplit(".", 1)[0]  # no dots: CI reads them as packages
    for result in results:
        case = ET.SubElement(
            element,
            "testcase",
            {"name": result.name, "classname": classname, "time": f"{result.seconds:.3f}"},
        )
        if not result.passed:
            failure = ET.SubElement(
                case, "failure", {"message": "; ".join(result.failures), "type": "PolicyTest"}
            )
            failure.text = _failure_text(case_record(result))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, "unicode") + "\n"


def _failure_text(record: dict[str, Any]) -> str:
    return _yaml({"expected": record["expected"], "actual": record["actual"]})


def _yaml(data: dict[str, Any]) -> str:
    # No folded lines: some TAP readers (Perl's YAMLish) refuse multi-line quoted scalars.
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=2**16)


def tap_report(results: Sequence[CaseResult]) -> str:
    """TAP version 14: a plan, one test point per case, a YAML block under a failed one."""
    lines = ["TAP version 14", f"1..{len(results)}"]
    for number, result in enumerate(results, 1):
        status = "ok" if result.passed else "not ok"
        lines.append(f"{status} {number} - {_tap_description(result.name)}")
        if not result.passed:
            record = case_record(result)
            block = _yaml(
                {
                    "message": record["message"],
                    "severity": "fail",
                    "expected": record["expected"],
                    "actual": record["actual"],
                }
            )
            lines += ["  ---", *(f"  {line}" for line in block.splitlines()), "  ..."]
    return "\n".join(lines) + "\n"


def _tap_description(name: str) -> str:
    # A bare `#` starts a directive (SKIP, TODO); a line break would end the test point.
    return " ".join(name.replace("\\", "\\\\").replace("#", "\\#").split())
