"""`audit show` over the lake: a record found by its id, reading only its id's date partition."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from kafka_policy_proxy.cli import main
from kafka_policy_proxy.pipeline.sources.decision_lookup import find_in_lake, lake_dates
from kafka_policy_proxy.pipeline.sources.lake import ingest
from kafka_policy_proxy.policy import decision_ids
from kafka_policy_proxy.policy.builders import create_request
from kafka_policy_proxy.policy.judge import ClusterFacts, judge
from kafka_policy_proxy.proxy.audit.file_sink import AuditLog
from kafka_policy_proxy.proxy.audit.recorder import DecisionRecorder
from tests.unit.policy.helpers import ALICE, cluster, compile_rules
from tests.unit.proxy.contexts import context

POLICY = compile_rules({"name": "small", "partitions": {"max": 3}})
DAYS = (datetime(2026, 3, 1, 23, 59, 59, tzinfo=UTC), datetime(2026, 3, 2, 12, tzinfo=UTC))


@pytest.fixture(scope="module")
def lake(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Any]]:
    """A lake of one ingest: records decided on two days (the first a second before midnight),
    and one older record whose id is 32 hex digits; the records as the proxy wrote them."""
    root = tmp_path_factory.mktemp("lookup")
    logs = root / "logs"
    logs.mkdir()
    audit = logs / "audit.jsonl"
    sink = AuditLog(audit)
    recorder = DecisionRecorder([sink], proxy_id="p", cluster_id=lambda: "c1")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(decision_ids, "_clock", decision_ids._Clock())
        for day in DAYS:
            patch.setattr(time, "time", day.timestamp)
            patch.setattr(time, "time_ns", lambda day=day: int(day.timestamp() * 1e9))
            asked = [create_request(f"t.{day.day}.{i}", 6, principal=ALICE) for i in range(5)]
            verdicts = judge(POLICY, asked, ClusterFacts(cluster()))
            recorder.record(context(19, 7), POLICY.revision, verdicts)
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    legacy = dict(records[0], decision_id=uuid.uuid4().hex, topic="legacy")
    with audit.open("a") as out:
        out.write(json.dumps(legacy) + "\n")
    ingest(spark, [str(logs)], str(root / "lake"))
    return root / "lake", [*records, legacy]


def test_a_record_is_read_back_as_written_from_its_dates_partition_alone(
    lake: tuple[Path, list[Any]],
) -> None:
    root, records = lake
    for wanted in (records[0], records[7]):
        found = find_in_lake(uuid.UUID(wanted["decision_id"]), str(root))
        assert found.record == wanted
        day = wanted["time"][:10]
        # One second before midnight: the next day is within the slack too (it has no batch).
        assert all("date=" in s for s in found.searched)
        assert found.searched[0].endswith(f"date={day}")
        assert found.found_in is not None and f"date={day}" in found.found_in


def test_an_id_without_its_record_is_looked_for_on_its_date_only(
    lake: tuple[Path, list[Any]],
) -> None:
    root, records = lake
    decided = records[7]
    moment = datetime.fromisoformat(decided["time"].replace("Z", "+00:00"))
    text = decided["decision_id"]
    unknown = uuid.UUID(text[:-4] + ("0000" if not text.endswith("0000") else "ffff"))
    assert lake_dates(unknown) == [moment.date()]
    found = find_in_lake(unknown, str(root))
    assert found.record is None
    assert found.searched == [str(root / "table=events" / f"date={moment.date()}")]


def test_an_older_id_without_a_time_is_looked_for_on_every_date(
    lake: tuple[Path, list[Any]],
) -> None:
    root, records = lake
    legacy = records[-1]
    found = find_in_lake(uuid.UUID(legacy["decision_id"]), str(root))
    assert found.record == legacy
    assert lake_dates(uuid.UUID(legacy["decision_id"])) is None


def test_the_command_reads_the_lake(
    lake: tuple[Path, list[Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    root, records = lake
    with pytest.raises(SystemExit) as exited:
        main(["audit", "show", records[3]["decision_id"], "--lake", str(root)])
    out, err = capsys.readouterr()
    assert exited.value.code == 0, err
    assert json.loads(out) == records[3]
    with pytest.raises(SystemExit) as exited:
        main(["audit", "show", decision_ids.new_decision_id(), "--lake", str(root)])
    out, err = capsys.readouterr()
    assert exited.value.code == 1 and "looked in: " in err and out == ""
