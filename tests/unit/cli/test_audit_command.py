"""`audit show ID`: the record behind a quoted id, from the audit file, its rotations and its
workers' files; 1 with where it looked when there is none, 2 for what is not an id."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from kafka_policy_proxy.cli import main
from kafka_policy_proxy.policy.builders import create_request
from kafka_policy_proxy.policy.decision_ids import new_decision_id
from kafka_policy_proxy.policy.judge import ClusterFacts, judge
from kafka_policy_proxy.proxy.audit.file_sink import AuditLog
from kafka_policy_proxy.proxy.audit.recorder import DecisionRecorder
from tests.unit.policy.helpers import ALICE, cluster, compile_rules
from tests.unit.proxy.contexts import context

POLICY = compile_rules({"name": "small", "partitions": {"max": 3}})


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()  # not the log lines of the decisions recorded before
    with pytest.raises(SystemExit) as exited:
        main(["audit", "show", *argv])
    out, err = capsys.readouterr()
    return int(exited.value.code or 0), out, err


async def _record(path: Path, topics: int, *, max_records: int = 100, **sink: Any) -> list[str]:
    """Judge and record a CreateTopics of `topics` topics into the audit file `path`; the ids."""
    log = AuditLog(path, **sink)
    recorder = DecisionRecorder(
        [log], proxy_id="p", cluster_id=lambda: "c1", max_records_per_request=max_records
    )
    asked = [create_request(f"t.{i}", 6, principal=ALICE) for i in range(topics)]
    recorded = recorder.record(
        context(19, 7), POLICY.revision, judge(POLICY, asked, ClusterFacts(cluster()))
    )
    await log.close()
    return [i for i in recorded.ids if i is not None]


def _rotations(directory: Path) -> list[Path]:
    return sorted(directory.glob("audit.jsonl.*"))


def _lines(*paths: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for p in paths for line in p.read_text().splitlines()]


async def test_a_record_is_found_in_the_file_its_rotations_and_a_workers_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    audit = tmp_path / "audit.jsonl"
    # Rotated every few records, as the proxy rotates at audit.max_bytes.
    ids = await _record(audit, 40, max_bytes=6000, backups=50, min_retention_s=0)
    worker = await _record(tmp_path / "audit.worker-1.jsonl", 1)
    rotated = _rotations(tmp_path)
    assert len(rotated) >= 3
    everything = _lines(audit, *rotated, tmp_path / "audit.worker-1.jsonl")
    by_id = {r["decision_id"]: r for r in everything}
    for wanted in (ids[0], ids[20], ids[-1], worker[0]):
        code, out, err = run(capsys, wanted, "--file", str(audit))
        assert code == 0, err
        assert json.loads(out) == by_id[wanted]
        assert err.startswith("found in ")
    # The oldest record is in the highest-numbered rotation.
    code, _, err = run(capsys, ids[0], "--file", str(audit))
    assert err.strip().rsplit(":", 1)[0].endswith(f"audit.jsonl.{len(rotated)}")


async def test_either_text_form_of_an_id_finds_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    audit = tmp_path / "audit.jsonl"
    [wanted] = await _record(audit, 1)
    code, out, _ = run(capsys, wanted.replace("-", "").upper(), "--file", str(audit))
    assert code == 0 and json.loads(out)["decision_id"] == wanted


async def test_a_summary_record_is_found_by_the_id_every_topic_quoted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    audit = tmp_path / "audit.jsonl"
    ids = await _record(audit, 30, max_records=10)
    assert len(ids) == 30 and len(set(ids)) == 1
    code, out, _ = run(capsys, ids[0], "--file", str(audit))
    record = json.loads(out)
    assert code == 0 and record["schema"] == 3 and record["summary"]["topics"] == 30


async def test_an_id_found_nowhere_exits_1_naming_every_file_searched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    audit = tmp_path / "audit.jsonl"
    await _record(audit, 40, max_bytes=6000, backups=50, min_retention_s=0)
    missing = tmp_path / "elsewhere.jsonl"
    code, out, err = run(capsys, new_decision_id(), "--file", str(audit), "--file", str(missing))
    assert code == 1 and out == ""
    for path in [audit, *_rotations(tmp_path)]:
        assert str(path) in err
    assert f"{missing} (no such file)" in err


def test_what_is_not_an_id_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    audit = str(tmp_path / "audit.jsonl")
    for bad in ("latest", "0193", str(uuid.uuid4()) + "x"):
        code, out, err = run(capsys, bad, "--file", audit)
        assert (code, out) == (2, "") and "is not a decision id" in err
    code, _, err = run(capsys, new_decision_id())
    assert code == 2 and "--file PATH or --lake PATH" in err
