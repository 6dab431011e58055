"""Every denial message a client sees ends with its decision's id, the id of its record."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import Awaitable, Mapping
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from kafka_policy_proxy.codec.guarded import guarded_api
from kafka_policy_proxy.codec.registry import decode_exact, encode, response_class
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.policy.model import TopicState
from kafka_policy_proxy.proxy.audit.recorder import DecisionRecorder
from kafka_policy_proxy.proxy.audit.sink import AuditDeliveryError
from kafka_policy_proxy.proxy.filters.api import Answer, ForwardModified
from kafka_policy_proxy.proxy.filters.topic_policy import TopicPolicyFilter
from tests.unit.codec.guarded_cases import CASES
from tests.unit.proxy.contexts import context
from tests.unit.proxy.enforcement_fakes import FakeReader, Records, create_topics, live_facts

POLICY = load_policy(
    """
version: 1
rules:
  - name: frozen
    match: {topic_prefix: frozen.}
    deny: true
    message: "ask #data-platform"
  - name: small
    partitions: {max: 6}
  - name: cleanup
    configs:
      cleanup.policy: {immutable: true}
broker_configs:
  - name: ops
    principals: ["User:ops"]
    resources: [cluster_default]
    keys: [log.retention.ms]
"""
)
CITED = re.compile(r" \(decision ([0-9a-f-]{36})\)$")
DELETE_RECORDS = 21
TOPIC_NAMES = ("frozen.a", "frozen.b")


def _cluster() -> InMemoryCluster:
    topics = [TopicState(name=n, partitions=3, replication_factor=1) for n in TOPIC_NAMES]
    return InMemoryCluster.of(topics, 3, {})


def _messages(entity: Any) -> list[tuple[str | None, str | None]]:
    """(the entry's name, its error message) of every entity with an error message field."""
    found = []
    fields = {f.name for f in dataclasses.fields(entity)}
    if "error_message" in fields and "error_code" in fields and int(entity.error_code) != 0:
        name = getattr(entity, "name", None) or getattr(entity, "resource_name", None)
        found.append((name, entity.error_message))
    for field in fields:
        value = getattr(entity, field)
        if isinstance(value, tuple):
            for item in value:
                if dataclasses.is_dataclass(item):
                    inner = _messages(item)
                    # A partition's message belongs to its topic.
                    named = getattr(entity, "name", None)
                    found += [(n or named, m) for n, m in inner]
    return found


def _every_version() -> list[tuple[int, int]]:
    return [(key, v) for key in sorted(CASES) for v in guarded_api(key).versions()]  # type: ignore[union-attr]


@pytest.mark.parametrize(("key", "version"), _every_version())
async def test_each_denied_entry_quotes_its_own_records_id(
    tmp_path: Path, key: int, version: int
) -> None:
    records = Records(tmp_path)
    request = CASES[key].request(version, TOPIC_NAMES)
    policy_filter = TopicPolicyFilter(
        lambda: POLICY, live_facts(FakeReader(_cluster())), records.recorder, -1
    )
    verdict = await policy_filter.on_request(context(key, version, request))
    assert isinstance(verdict, Answer)
    ids = {r["topic"]: r["decision_id"] for r in records.read()}
    assert set(ids) == set(TOPIC_NAMES) and len(set(ids.values())) == 2
    answered = _messages(decode_exact(response_class(key, version), verdict.body))
    has_message = bool(answered) and answered[0][1] is not None
    # DeleteRecords has no message field; DeleteTopics before v5 neither: the record has it.
    assert has_message == (key != DELETE_RECORDS and not (key == 20 and version < 5))
    for name, message in answered:
        if has_message:
            assert message is not None and message.startswith("[frozen] ")
            cited = CITED.search(message)
            assert cited is not None and cited.group(1) == ids[name]


async def test_a_summarised_request_quotes_the_summary_records_one_id(tmp_path: Path) -> None:
    records = Records(tmp_path)  # max_records_per_request 100
    request = create_topics(*[(f"wide.{i}", 64) for i in range(150)], ("narrow", 3))
    policy_filter = TopicPolicyFilter(
        lambda: POLICY, live_facts(FakeReader()), records.recorder, -1
    )
    verdict = await policy_filter.on_request(context(19, 7, request))
    assert isinstance(verdict, ForwardModified) and verdict.hook is not None
    [summary] = records.read()
    assert summary["summary"]["topics"] == 151
    plan_answer = verdict.hook(_created_answer("narrow"))
    answered = _messages(decode_exact(response_class(19, 7), plan_answer))
    assert len(answered) == 150
    for _, message in answered:
        cited = CITED.search(message or "")
        assert cited is not None and cited.group(1) == summary["decision_id"]


def _created_answer(*names: str) -> bytes:
    case = CASES[19]
    forwarded = case.request(7, names)
    return encode(case.broker_answer(forwarded))


async def test_without_a_sink_the_id_is_in_the_answer_and_the_log_line(tmp_path: Path) -> None:
    recorder = DecisionRecorder([], proxy_id="p", cluster_id=lambda: None)
    policy_filter = TopicPolicyFilter(lambda: POLICY, live_facts(FakeReader()), recorder, -1)
    with capture_logs() as logs:
        verdict = await policy_filter.on_request(context(19, 7, create_topics(("big", 64))))
    assert isinstance(verdict, Answer)
    [(_, message)] = _messages(decode_exact(response_class(19, 7), verdict.body))
    cited = CITED.search(message or "")
    [line] = [entry for entry in logs if entry["event"] == "policy denied"]
    assert cited is not None and line["decision_ids"] == [cited.group(1)]


async def test_a_cluster_state_denial_quotes_its_id_after_the_cut_reason(tmp_path: Path) -> None:
    records = Records(tmp_path)
    reader = FakeReader(_cluster())
    reader.unavailable = True
    request = CASES[44].request(1, ["ok.a"])  # `cleanup` needs the topic's configs
    policy_filter = TopicPolicyFilter(lambda: POLICY, live_facts(reader), records.recorder, -1)
    verdict = await policy_filter.on_request(context(44, 1, request))
    assert isinstance(verdict, Answer)
    [(_, message)] = _messages(decode_exact(response_class(44, 1), verdict.body))
    [record] = records.read()
    assert record["violations"][0]["rule"] == "cluster-state"
    assert message is not None and message.startswith("[cluster-state]")
    assert message.endswith(f"(decision {record['decision_id']})")


class _Lost:
    """An audit topic that takes each record and then fails to deliver it."""

    enabled = True

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def write(self, record: Mapping[str, Any]) -> Awaitable[None]:
        self.records.append(dict(record))
        lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        lost.set_exception(AuditDeliveryError("audit topic audit: not delivered: broker down"))
        return lost

    async def close(self) -> None:
        pass


async def test_an_audit_closed_refusal_quotes_each_entrys_id() -> None:
    sink = _Lost()
    recorder = DecisionRecorder([sink], proxy_id="p", cluster_id=lambda: None, closed=True)
    policy_filter = TopicPolicyFilter(lambda: POLICY, live_facts(FakeReader()), recorder, -1)
    request = create_topics(("ok.a", 3), ("ok.b", 3))
    with capture_logs() as logs:
        verdict = await policy_filter.on_request(context(19, 7, request))
    assert isinstance(verdict, Answer)
    ids = {r["topic"]: r["decision_id"] for r in sink.records}
    # The records never reached the audit topic: the log line names the ids quoted.
    [line] = [e for e in logs if e["event"] == "mutation refused: audit log unavailable"]
    assert line["decision_ids"] == [ids["ok.a"], ids["ok.b"]]
    answered = _messages(decode_exact(response_class(19, 7), verdict.body))
    assert [n for n, _ in answered] == ["ok.a", "ok.b"]
    for name, message in answered:
        assert message is not None and "audit.on_failure: closed" in message
        assert message.endswith(f"(decision {ids[name]})")


async def test_a_broker_config_denial_quotes_its_id(tmp_path: Path) -> None:
    records = Records(tmp_path)
    request = CASES[44].request(1, ["broker:1"])  # sets retention.ms: no rule grants it
    policy_filter = TopicPolicyFilter(
        lambda: POLICY, live_facts(FakeReader()), records.recorder, -1
    )
    verdict = await policy_filter.on_request(context(44, 1, request, principal="User:app"))
    assert isinstance(verdict, Answer)
    [(name, message)] = _messages(decode_exact(response_class(44, 1), verdict.body))
    [record] = records.read()
    assert (name, record["resource_type"]) == ("1", "broker")
    assert message is not None and message.endswith(f"(decision {record['decision_id']})")
