"""One audit line classified: a good event, blank, an unknown schema version or malformed with
a reason naming the field; an audit topic record's envelope is checked, then its event alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.audit_data import bad_lines, example_cluster, generate_events
from kafka_policy_proxy.pipeline.sources.audit_lines import (
    MALFORMED,
    SAMPLE_BYTES,
    classify,
    classify_envelope,
    sample,
)
from kafka_policy_proxy.policy.decision_log import V2_FIELDS
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.proxy.audit.kafka_sink import envelope

REPO = Path(__file__).resolve().parents[4]
EXAMPLE = load_policy((REPO / "examples" / "policy.yaml").read_text(), "policy.yaml")
GOOD = list(generate_events(EXAMPLE, example_cluster(), 40))
RECORDS = list(generate_events(EXAMPLE, example_cluster(), 40, seed=5))  # the topic's


def wrapped(event: Any) -> str:
    """The event as the audit topic's record value: a CloudEvents envelope."""
    return json.dumps(envelope(event, "kafka-policy-proxy/test"))


@pytest.mark.parametrize(("line", "kind", "reason"), bad_lines(GOOD), ids=lambda v: str(v)[:40])
def test_each_fault_class_is_classified_with_its_reason(line: str, kind: str, reason: str) -> None:
    problem = classify(line)
    assert problem is not None
    assert (problem.kind, problem.reason) == (kind, reason)


def test_good_events_of_both_versions_classify_as_good() -> None:
    v1 = [{k: v for k, v in e.items() if k not in V2_FIELDS} | {"schema": 1} for e in GOOD[:5]]
    for event in [*GOOD, *v1]:
        assert classify(json.dumps(event)) is None


def test_a_sample_is_the_first_bytes_without_a_broken_character() -> None:
    line = "é" * SAMPLE_BYTES
    assert sample(line) == "é" * (SAMPLE_BYTES // 2)
    assert sample("short") == "short"


def test_bytes_that_are_not_utf8_are_a_malformed_line_shown_escaped() -> None:
    good = json.dumps(GOOD[0]).encode()
    assert classify(good) is None
    bad = good.replace(b'"time": "', b'"time": "\xff', 1)
    problem = classify(bad)
    assert problem is not None
    assert (problem.kind, problem.reason) == ("malformed", "not valid UTF-8")
    assert sample(bad).startswith('{"time": "\\xff2026-')
    # A character cut by the sample's end is dropped, as in a line that is UTF-8.
    assert sample(b"\xff" + "é".encode() * SAMPLE_BYTES) == "\\xff" + "é" * 99


def test_a_record_with_no_value_is_malformed() -> None:
    problem = classify_envelope(None)
    assert problem is not None
    assert (problem.kind, problem.reason) == ("malformed", "record with no value")


def test_a_good_record_is_a_good_event() -> None:
    assert classify_envelope(wrapped(RECORDS[0])) is None


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (json.dumps({"data": RECORDS[0]}), "not a CloudEvents 1.0 envelope"),
        (
            json.dumps({**envelope(RECORDS[0], "s"), "specversion": "0.3"}),
            "not a CloudEvents 1.0 envelope",
        ),
        (json.dumps([envelope(RECORDS[0], "s")]), "not a CloudEvents 1.0 envelope"),
        (
            json.dumps({**envelope(RECORDS[0], "s"), "data": "{}"}),
            "envelope data: not a JSON object: string",
        ),
        (wrapped(RECORDS[0])[:-2], "not valid JSON"),
    ],
)
def test_a_bad_envelope_is_malformed_with_its_reason(value: str, reason: str) -> None:
    problem = classify_envelope(value)
    assert problem is not None
    assert (problem.kind, problem.reason) == (MALFORMED, reason)


def test_the_event_in_an_envelope_is_judged_as_a_log_line_is() -> None:
    for line, kind, reason in bad_lines(RECORDS):
        if not line.strip() or not line.startswith("{"):
            continue  # not an object: it cannot be an envelope's data
        try:
            event = json.loads(line)
        except ValueError:
            continue
        problem = classify_envelope(wrapped(event))
        assert problem is not None and (problem.kind, problem.reason) == (kind, reason)
        assert classify(line) == problem
