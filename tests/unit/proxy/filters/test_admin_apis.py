"""The admin API filter: judged by principal, answered with kio per version, recorded."""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from harness.messages import build
from kafka_policy_proxy.codec.admin_denials import filled
from kafka_policy_proxy.codec.api_classes import CLUSTER_MUTATIONS
from kafka_policy_proxy.codec.api_versions import proxy_range
from kafka_policy_proxy.codec.registry import decode_exact, request_class, response_class
from kafka_policy_proxy.policy.decision_log import DecisionRecord
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.proxy.filters.admin_apis import AdminApiFilter
from kafka_policy_proxy.proxy.filters.api import Answer, Close, Forward, Verdict
from tests.unit.proxy.contexts import context
from tests.unit.proxy.enforcement_fakes import Records

POLICY = load_policy(
    """
version: 1
rules:
  - {name: bounds, partitions: {max: 100}}
admin_apis:
  - name: platform
    principals: ['User:platform-*']
    apis: ['*']
  - name: acls
    principals: ['User:alice']
    apis: [CreateAcls]
"""
)


@pytest.fixture
def records(tmp_path: Path) -> Records:
    return Records(tmp_path)


def scram_upsert(version: int = 0) -> Any:
    m = importlib.import_module(request_class(51, version).__module__)
    up = build(
        m.ScramCredentialUpsertion,
        name="admin",
        mechanism=1,
        iterations=8192,
        salt=b"salt",
        salted_password=b"x" * 32,
    )
    return build(m.AlterUserScramCredentialsRequest, deletions=(), upsertions=(up,))


def run(
    records: Records,
    key: int,
    version: int,
    request: Any,
    principal: str,
    *,
    policy: CompiledPolicy | None = POLICY,
) -> Verdict:
    ctx = context(key, version, request, principal=principal)
    return AdminApiFilter(lambda: policy, records.recorder).on_request(ctx)


def test_it_handles_exactly_the_cluster_mutations(records: Records) -> None:
    assert AdminApiFilter(lambda: POLICY, records.recorder).api_keys == CLUSTER_MUTATIONS


@pytest.mark.parametrize("principal", ["User:ANONYMOUS", "User:alice", "User:platform"])
def test_a_scram_upsert_is_answered_denied_unless_allowed(records: Records, principal: str) -> None:
    verdict = run(records, 51, 0, scram_upsert(), principal)
    assert isinstance(verdict, Answer)
    answer = decode_exact(response_class(51, 0), verdict.body)
    ((result),) = answer.results
    assert (result.user, result.error_code.value) == ("admin", 31)
    assert f"{principal} may not call AlterUserScramCredentials" in result.error_message
    (record,) = records.read()
    DecisionRecord.model_validate(record)
    assert record["action"] == "admin_api" and record["topic"] is None
    assert (record["resource_type"], record["resource"]) == ("api", "AlterUserScramCredentials")
    assert (record["principal"], record["decision"]) == (principal, "denied")
    assert record["violations"][0]["rule"] == "admin-apis"


@pytest.mark.parametrize(("principal", "rule"), [("User:platform-admin", "platform")])
def test_an_allowed_principal_is_forwarded_and_recorded(
    records: Records, principal: str, rule: str
) -> None:
    assert isinstance(run(records, 51, 0, scram_upsert(), principal), Forward)
    (record,) = records.read()
    assert record["decision"] == "allowed" and record["request"]["rule"] == rule


def test_a_principal_is_allowed_only_the_apis_listed_for_it(records: Records) -> None:
    m = importlib.import_module(request_class(30, 3).__module__)
    assert isinstance(
        run(records, 30, 3, build(m.CreateAclsRequest, creations=()), "User:alice"), Forward
    )
    m = importlib.import_module(request_class(31, 3).__module__)
    assert isinstance(
        run(records, 31, 3, build(m.DeleteAclsRequest, filters=()), "User:alice"), Answer
    )


def _every_version() -> list[tuple[int, int]]:
    spans = {key: proxy_range(key) for key in sorted(CLUSTER_MUTATIONS)}
    return [(k, v) for k, s in spans.items() if s is not None for v in range(s[0], s[1] + 1)]


@pytest.mark.parametrize(("key", "version"), _every_version())
def test_every_version_is_answered_or_refused_never_forwarded(
    records: Records, key: int, version: int
) -> None:
    request = filled(request_class(key, version), ErrorCode(0), "")
    verdict = run(records, key, version, request, "User:ANONYMOUS")
    assert isinstance(verdict, Answer | Close), verdict
    (record,) = records.read()
    cited = f"{record['violations'][0]['message']} (decision {record['decision_id']})"
    if isinstance(verdict, Answer):
        response = decode_exact(response_class(key, version), verdict.body)
        # Every message the answer carries (where its version has the field) quotes the id.
        assert all(m == cited for m in _error_messages(response)), response
    else:
        assert verdict.detail == cited


def _error_messages(entity: Any) -> list[str]:
    """Every non-empty error message in a decoded response, nested entries included."""
    found = []
    for field in dataclasses.fields(entity):
        value = getattr(entity, field.name)
        if field.name == "error_message" and value:
            found.append(value)
        for item in value if isinstance(value, tuple) else ():
            if dataclasses.is_dataclass(item):
                found += _error_messages(item)
    return found


def test_a_denial_message_quotes_the_records_id(records: Records) -> None:
    verdict = run(records, 51, 0, scram_upsert(), "User:alice")
    assert isinstance(verdict, Answer)
    [message] = _error_messages(decode_exact(response_class(51, 0), verdict.body))
    (record,) = records.read()
    assert message == f"{record['violations'][0]['message']} (decision {record['decision_id']})"


def test_no_policy_file_forwards_and_records_nothing(records: Records) -> None:
    assert isinstance(run(records, 51, 0, scram_upsert(), "User:ANONYMOUS", policy=None), Forward)
    assert records.read() == []
