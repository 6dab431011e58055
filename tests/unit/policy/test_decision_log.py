"""The decision record: its published JSON Schema is current, and records follow it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from kafka_policy_proxy.cli.policy_command import audit_event_schema_text
from kafka_policy_proxy.policy.admin_apis import AdminRequest
from kafka_policy_proxy.policy.builders import create_request, delete_topic_request
from kafka_policy_proxy.policy.decision_log import (
    SCHEMA_VERSION,
    UNAUTHENTICATED,
    V2_FIELDS,
    DecisionRecord,
    Outcome,
    Stamp,
    admin_record,
    decision_record,
    json_schema,
    new_decision_id,
    refusal_record,
)
from kafka_policy_proxy.policy.judge import ClusterFacts, judge, judge_admin
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.policy.model import Decision, Principal, TopicRequest
from kafka_policy_proxy.policy.revision import policy_revision
from tests.unit.policy.helpers import ALICE, DEFAULTS, cluster, compile_rules, topic

SCHEMA_FILE = Path(__file__).resolve().parents[3] / "docs" / "audit-event.schema.json"


def test_the_published_schema_is_current() -> None:
    assert SCHEMA_FILE.read_text() == audit_event_schema_text(), (
        "docs/audit-event.schema.json is out of date: regenerate it with "
        "`kafka-policy-proxy policy audit-schema > docs/audit-event.schema.json`"
    )


def test_the_schema_names_every_field_the_record_has() -> None:
    schema = json_schema()
    policy = compile_rules({"name": "small", "partitions": {"max": 3}})
    (verdict,) = judge(policy, [create_request("a.b", 6, principal=ALICE)], ClusterFacts(cluster()))
    assert verdict.decision is not None
    record = _record(verdict.request, verdict.decision)
    # only where overrides changed it; summaries; in-use facts
    optional = ["overrides", "rewritten", "summary", "in_use"]
    assert list(record) + optional == list(schema["properties"])
    assert set(schema["required"]) | set(V2_FIELDS) == set(record)
    capping = compile_rules({"name": "small", "partitions": {"max": 3, "cap": True}})
    (capped,) = judge(capping, [create_request("a.b", 6, principal=ALICE)], ClusterFacts(cluster()))
    assert capped.decision is not None and capped.original is not None
    overridden = decision_record(capped.original, capped.decision, _stamp(), capped.request)
    assert list(overridden) == list(schema["properties"])[:-2]  # no summary, no in_use
    assert overridden["decision"] == "allowed"
    assert overridden["request"]["requested"]["partitions"] == 6
    assert overridden["rewritten"]["requested"]["partitions"] == 3
    assert overridden["overrides"] == [
        {"rule": "small", "kind": "cap", "target": "partitions", "before": "6", "after": "3"}
    ]
    DecisionRecord.model_validate(overridden)
    assert schema["$defs"]["Outcome"]["enum"] == [o.value for o in Outcome]
    assert schema["properties"]["request"]["type"] == "object"
    assert schema["allOf"][0]["else"] == {"required": list(V2_FIELDS)}
    assert (record["resource_type"], record["resource"], record["topic"]) == ("topic", "a.b", "a.b")
    DecisionRecord.model_validate(record)
    assert record["decision"] == "denied" and record["schema"] == SCHEMA_VERSION


def test_v1_records_lack_the_v2_fields_and_v2_records_need_them() -> None:
    request = delete_topic_request("a.b", principal=ALICE)
    policy = compile_rules({"name": "keep", "match": {"actions": ["delete"]}, "deny": True})
    (verdict,) = judge(policy, [request], ClusterFacts(cluster(topic("a.b"))))
    assert verdict.decision is not None
    record = _record(verdict.request, verdict.decision)
    v1 = {k: v for k, v in record.items() if k not in V2_FIELDS} | {"schema": 1}
    DecisionRecord.model_validate(v1)
    with pytest.raises(ValidationError, match="schema 2 needs proxy_id"):
        DecisionRecord.model_validate({k: v for k, v in record.items() if k != "proxy_id"})
    with pytest.raises(ValidationError, match="schema 1 has no decision_id"):
        DecisionRecord.model_validate(v1 | {"decision_id": "x"})
    with pytest.raises(ValidationError, match="schema 2 needs resource"):
        DecisionRecord.model_validate({k: v for k, v in record.items() if k != "resource"})
    # cluster_id may be null (Metadata gave none); the others are strings.
    DecisionRecord.model_validate(record | {"cluster_id": None})
    with pytest.raises(ValidationError):
        DecisionRecord.model_validate(record | {"decision": "maybe"})


def test_an_admin_api_record_names_the_api_not_a_topic() -> None:
    policy = load_policy(
        "version: 1\nrules: [{name: r, partitions: {max: 9}}]\n"
        "admin_apis: [{name: ops, principals: ['User:ops'], apis: [ElectLeaders]}]\n"
    )
    decision = judge_admin(policy, AdminRequest("CreateAcls", Principal("User:ops", "cli")))
    record = admin_record(
        decision,
        Stamp(
            time="2026-11-22T04:47:01.123456Z",
            decision_id=new_decision_id(),
            policy_revision=policy.revision,
            cluster_id=None,
            proxy_id="proxy-a",
            conn=3,
            client="10.1.2.3:5",
            api=decision.request.api,
            api_key=30,
            api_version=3,
        ),
    )
    # No overrides, rewritten, summary or in_use.
    assert list(record) == list(json_schema()["properties"])[:-4]
    parsed = DecisionRecord.model_validate(record)
    assert (parsed.action, parsed.resource_type, parsed.resource) == (
        "admin_api",
        "api",
        "CreateAcls",
    )
    assert parsed.topic is None and parsed.decision is Outcome.DENIED
    assert [v.rule for v in parsed.violations] == ["admin-apis"]
    with pytest.raises(ValidationError, match="`topic` is set exactly"):
        DecisionRecord.model_validate(record | {"topic": "a.b"})
    with pytest.raises(
        ValidationError, match="`action` is admin_api or alter_broker_config exactly"
    ):
        DecisionRecord.model_validate(record | {"action": "create"})


def test_a_refusal_before_authentication_is_denied_and_names_no_principal() -> None:
    record = refusal_record(
        Stamp(
            time="2026-11-22T04:47:01.123456Z",
            decision_id=new_decision_id(),
            policy_revision=policy_revision("rules: []"),
            cluster_id="OPJ1mOpYQSm4F17dkRicdw",
            proxy_id="proxy-a",
            conn=4,
            client="10.1.2.3:5",
            api="CreateTopics",
            api_key=19,
            api_version=7,
        ),
        client_id="rdkafka",
        listener="bootstrap",
        sasl_state="HANDSHAKE_SENT",
    )
    # No overrides, rewritten, summary or in_use.
    assert list(record) == list(json_schema()["properties"])[:-4]
    parsed = DecisionRecord.model_validate(record)
    assert (parsed.principal, parsed.decision, parsed.mode) == (
        UNAUTHENTICATED,
        "denied",
        "enforce",
    )
    assert (parsed.action, parsed.resource_type, parsed.resource, parsed.topic) == (
        "admin_api",
        "api",
        "CreateTopics",
        None,
    )
    [violation] = parsed.violations
    assert violation.rule == "authentication-order"
    assert violation.message == (
        "[authentication-order] CreateTopics sent before SASL authentication completed "
        "(the SASL exchange is HANDSHAKE_SENT); connection closed"
    )
    # Not an admin API call's request: replay must not judge it by admin_apis.
    assert list(record["request"]) == ["refused", "api", "listener", "sasl_state"]


def test_ids_are_unique_and_revisions_are_content_hashes() -> None:
    assert len({new_decision_id() for _ in range(1000)}) == 1000
    assert policy_revision("rules: []") == policy_revision(b"rules: []")
    assert policy_revision("rules: []") != policy_revision("rules: [] ")
    assert policy_revision("x").startswith("sha256:") and len(policy_revision("x")) == 23


def _stamp() -> Stamp:
    return Stamp(
        time="2026-11-22T04:47:01.123456Z",
        decision_id=new_decision_id(),
        policy_revision=policy_revision(str(DEFAULTS)),
        cluster_id="OPJ1mOpYQSm4F17dkRicdw",
        proxy_id="proxy-a",
        conn=17,
        client="10.1.2.3:51234",
        api="CreateTopics",
        api_key=19,
        api_version=7,
    )


def _record(request: TopicRequest, decision: Decision) -> dict[str, Any]:
    return decision_record(request, decision, _stamp())
