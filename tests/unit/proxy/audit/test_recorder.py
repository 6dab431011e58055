"""The decision recorder over its sinks: every record to every sink, and audit.on_failure."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Mapping
from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

from kafka_policy_proxy.policy.admin_apis import AdminDecision, AdminRequest
from kafka_policy_proxy.policy.builders import create_request
from kafka_policy_proxy.policy.decision_ids import is_time_ordered, parse_decision_id
from kafka_policy_proxy.policy.judge import ClusterFacts, Verdict, judge
from kafka_policy_proxy.policy.model import Principal, Violation
from kafka_policy_proxy.proxy.audit.budget import AuditBudget
from kafka_policy_proxy.proxy.audit.file_sink import AuditLog
from kafka_policy_proxy.proxy.audit.recorder import DecisionRecorder
from kafka_policy_proxy.proxy.audit.sink import AuditDeliveryError, AuditSink
from tests.unit.policy.helpers import ALICE, cluster, compile_rules
from tests.unit.proxy.contexts import context

CREATE_ACLS = 30
CREATE_TOPICS = 19
ALLOWED = AdminDecision(AdminRequest("CreateAcls", Principal("User:alice")), allowed=True)
DENIED = AdminDecision(
    AdminRequest("CreateAcls", Principal("User:alice")),
    allowed=False,
    violations=(Violation("admin-apis", "[admin-apis] CreateAcls is not allowed"),),
)


class Sink:
    """A sink that keeps its records and hands out the delivery the test gives it."""

    def __init__(
        self,
        name: str,
        closed: list[str],
        *,
        enabled: bool = True,
        delivery: Awaitable[None] | None = None,
    ) -> None:
        self.name = name
        self.enabled = enabled
        self.records: list[dict[str, Any]] = []
        self._closed = closed
        self._delivery = delivery

    def write(self, record: Mapping[str, Any]) -> Awaitable[None] | None:
        self.records.append(dict(record))
        return self._delivery

    async def close(self) -> None:
        self._closed.append(self.name)


def recorder(*sinks: AuditSink, closed: bool = False) -> DecisionRecorder:
    """A recorder writing to these sinks, in this order."""
    return DecisionRecorder(sinks, proxy_id="proxy-a:9192", cluster_id=lambda: "c1", closed=closed)


async def test_every_record_goes_to_every_sink_and_deliveries_are_kept(tmp_path: Path) -> None:
    delivered = asyncio.get_running_loop().create_future()
    topic = Sink("topic", [], delivery=delivered)
    file = AuditLog(tmp_path / "audit.jsonl")
    recorded = recorder(file, topic).record_admin(context(CREATE_ACLS, 3), "rev-1", ALLOWED)
    assert recorded.written == [delivered]  # the file wrote it at once: nothing to wait for
    [line] = (tmp_path / "audit.jsonl").read_text().splitlines()
    assert json.loads(line) == topic.records[0]
    assert topic.records[0]["policy_revision"] == "rev-1"
    assert recorded.ids == (topic.records[0]["decision_id"],)
    await file.close()


async def test_no_record_is_made_when_no_sink_is_enabled_yet_the_decision_has_its_id() -> None:
    off = Sink("off", [], enabled=False)
    with capture_logs() as logs:
        recorded = recorder(off).record_admin(context(CREATE_ACLS, 3), "rev-1", DENIED)
    assert recorded.written == [] and off.records == []
    [decision_id] = recorded.ids
    assert decision_id is not None and is_time_ordered(parse_decision_id(decision_id))
    [line] = logs  # the one place the id is kept: the log line of the denial
    assert line["event"] == "policy denied" and line["decision_id"] == decision_id
    on = Sink("on", [])
    recorder(off, on).record_admin(context(CREATE_ACLS, 3), "rev-1", ALLOWED)
    assert len(off.records) == len(on.records) == 1


async def test_closed_waits_for_the_deliveries_and_names_a_failed_one() -> None:
    loop = asyncio.get_running_loop()
    delivered, lost = loop.create_future(), loop.create_future()
    closed = recorder(Sink("topic", []), closed=True)
    assert closed.waits_for_audit
    waiting = asyncio.ensure_future(closed.confirmed([delivered]))
    await asyncio.sleep(0)
    assert not waiting.done()
    delivered.set_result(None)
    assert await waiting is None
    lost.set_exception(AuditDeliveryError("audit topic audit: not delivered: broker down"))
    assert await closed.confirmed([lost]) == (
        "the audit log cannot be written (audit.on_failure: closed): "
        "audit topic audit: not delivered: broker down"
    )
    assert await closed.confirmed([]) is None


async def test_open_never_waits_for_a_delivery() -> None:
    pending: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    open_ = recorder(Sink("topic", [], delivery=pending))
    assert not open_.waits_for_audit
    written = open_.record_admin(context(CREATE_ACLS, 3), "rev-1", ALLOWED).written
    assert written == [pending]
    assert await open_.confirmed(written) is None
    assert not pending.done()


async def test_closing_the_recorder_closes_every_sink_in_order() -> None:
    closed: list[str] = []
    await recorder(Sink("file", closed), Sink("topic", closed)).close()
    assert closed == ["file", "topic"]


def _verdicts(topics: int) -> list[Verdict]:
    policy = compile_rules({"name": "small", "partitions": {"max": 3}})
    asked = [create_request(f"b.{i}", 6, principal=ALICE) for i in range(topics)]
    return judge(policy, asked, ClusterFacts(cluster()))


async def test_a_request_over_the_threshold_writes_one_summary_record_and_one_log_line() -> None:
    sink = Sink("file", [])
    budget = AuditBudget(10**9)
    bounded = DecisionRecorder(
        [sink], proxy_id="p", cluster_id=lambda: None, max_records_per_request=100,
        budget=budget,
    )  # fmt: skip
    ctx = context(CREATE_TOPICS, 7, principal="User:alice")
    with capture_logs() as logs:
        each = bounded.record(ctx, "rev", _verdicts(100))
    assert len(sink.records) == 100  # up to the threshold: one record per topic
    assert list(each.ids) == [r["decision_id"] for r in sink.records]
    # ... and one log line for the request: the count, the first 20 topics with their ids.
    [line] = logs
    assert (line["event"], line["topics"], line["rules"]) == ("policy denied", 100, {"small": 100})
    assert line["sample"] == [f"b.{i}" for i in range(20)]
    assert line["decision_ids"] == list(each.ids[:20])
    assert list(each.ids) == sorted(set(each.ids))  # distinct, and in the order minted
    sink.records.clear()
    with capture_logs() as logs:
        summarised = bounded.record(ctx, "rev", _verdicts(10_000))
    [summary] = sink.records
    # One id for the request: every topic's answer quotes the summary record's.
    assert set(summarised.ids) == {summary["decision_id"]} and len(summarised.ids) == 10_000
    assert summary["summary"]["topics"] == 10_000 and summary["decision"] == "denied"
    assert summary["summary"]["counts"][1] == {
        "decision": "denied", "rule": "small", "rule_mode": "enforce", "topics": 10_000,
    }  # fmt: skip
    [line] = logs
    assert line["event"] == "policy denied (summarised)" and len(line["sample"]) == 20
    assert line["decision_id"] == summary["decision_id"]
    # The bytes written are charged to the principal whose request it was.
    assert budget._current("User:alice") >= len(json.dumps(summary, separators=(",", ":")))


async def test_one_request_logs_one_line_per_outcome_with_a_capped_sample() -> None:
    policy = compile_rules(
        {"name": "small", "partitions": {"max": 3}},
        {"name": "tiny", "mode": "audit", "partitions": {"max": 1}},
    )
    asked = [create_request(f"b.{i}", 6, principal=ALICE) for i in range(30)]
    asked += [
        create_request("watched", 2, principal=ALICE),
        create_request("ok", 1, principal=ALICE),
    ]
    verdicts = judge(policy, asked, ClusterFacts(cluster()))
    sampling = DecisionRecorder([], proxy_id="p", cluster_id=lambda: None, sample_size=5)
    with capture_logs() as logs:
        recorded = sampling.record(context(CREATE_TOPICS, 7), "rev", verdicts)
    denied, audited = logs
    assert (denied["event"], denied["topics"], denied["rules"]) == (
        "policy denied",
        30,
        {"small": 30},
    )
    assert denied["sample"] == [f"b.{i}" for i in range(5)]
    assert denied["decision_ids"] == list(recorded.ids[:5])
    assert (audited["event"], audited["topics"], audited["sample"]) == (
        "policy audit-would-deny", 1, ["watched"],
    )  # fmt: skip
    assert audited["decision_ids"] == [recorded.ids[30]] and audited["rules"] == {"tiny": 1}
