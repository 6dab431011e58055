"""The audit file: rotation never deletes history younger than audit.min_retention_s, disk use
is bounded by audit.max_total_bytes, and a record it cannot keep refuses a closed mutation."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from kafka_policy_proxy.policy.admin_apis import AdminDecision, AdminRequest
from kafka_policy_proxy.policy.model import Principal
from kafka_policy_proxy.proxy.audit.file_sink import AuditLog, Refused
from kafka_policy_proxy.proxy.audit.recorder import DecisionRecorder
from kafka_policy_proxy.proxy.audit.sink import AuditDeliveryError
from tests.unit.proxy.contexts import context

PAD = "x" * 200  # each record ~230 bytes
CREATE_ACLS = 30


def _lines(path: Path) -> list[int]:
    """The record numbers in the file and its backups, oldest first."""
    backups = [path.with_name(f"{path.name}.{i}") for i in range(9, 0, -1)]
    files = [f for f in backups if f.exists()] + [path]
    return [json.loads(line)["n"] for f in files for line in f.read_text().splitlines()]


def _total_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir())


def _pressure() -> float:
    return REGISTRY.get_sample_value("kpp_audit_rotation_pressure_total") or 0.0


def test_rotates_old_history_as_before(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    sink = AuditLog(path, max_bytes=1024, backups=2, min_retention_s=0)
    for n in range(40):
        assert sink.write({"n": n, "pad": PAD}) is None
    kept = _lines(path)
    assert kept == list(range(kept[0], 40)) and kept[0] > 0  # the oldest rotated away
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "audit.jsonl",
        "audit.jsonl.1",
        "audit.jsonl.2",
    ]


async def test_young_history_is_never_rotated_away_and_disk_use_is_bounded(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    now = [time.time()]
    sink = AuditLog(
        path, max_bytes=1024, backups=2, min_retention_s=3600, max_total_bytes=6000,
        clock=lambda: now[0],
    )  # fmt: skip
    before = _pressure()
    refused: list[Refused] = []
    for n in range(200):
        result = sink.write({"n": n, "pad": PAD})
        if result is not None:
            refused.append(result)
    # Every record up to the total bound is kept, from the very first; the rest refused.
    kept = _lines(path)
    assert kept == list(range(len(kept)))
    assert 6000 - 300 < _total_bytes(tmp_path) <= 6000
    assert len(refused) == 200 - len(kept)
    assert _pressure() > before  # alerted (at most once a second, not once a record)
    assert _pressure() - before <= 2
    with pytest.raises(AuditDeliveryError, match=r"audit\.max_total_bytes \(6000\) reached"):
        await refused[0]
    # Once the oldest backup is older than the retention, rotation goes on.
    hour_ago = now[0] - 3601
    os.utime(path.with_name("audit.jsonl.2"), (hour_ago, hour_ago))
    now[0] += 2  # past the recheck interval
    assert sink.write({"n": 1000, "pad": PAD}) is None
    assert _lines(path)[-1] == 1000 and _lines(path)[0] > 0
    await sink.close()


async def test_a_failed_write_is_refused_and_a_closed_recorder_refuses_the_mutation() -> None:
    full = AuditLog(Path("/dev/full"))  # every write fails: ENOSPC
    result = full.write({"n": 1})
    assert isinstance(result, Refused)
    recorder = DecisionRecorder([full], proxy_id="p", cluster_id=lambda: None, closed=True)
    allowed = AdminDecision(AdminRequest("CreateAcls", Principal("User:alice")), allowed=True)
    written = recorder.record_admin(context(CREATE_ACLS, 3), "rev", allowed).written
    reason = await recorder.confirmed(written)
    assert reason is not None and "No space left on device" in reason
    opened = DecisionRecorder([full], proxy_id="p", cluster_id=lambda: None)
    assert (
        await opened.confirmed(opened.record_admin(context(CREATE_ACLS, 3), "r", allowed).written)
        is None
    )
    await full.close()


def test_stdout_gets_each_record_as_a_line(capsys: pytest.CaptureFixture[str]) -> None:
    sink = AuditLog(stdout=True)
    assert sink.enabled and sink.write({"n": 1}) is None and sink.write({"n": 2}) is None
    assert capsys.readouterr().out == '{"n":1}\n{"n":2}\n'
