"""The admin API judge: denied by default, allowed by principal (exact or glob) and API name."""

from __future__ import annotations

import pytest

from kafka_policy_proxy.policy.admin_apis import ADMIN_APIS_RULE, AdminRequest
from kafka_policy_proxy.policy.decision_log import Outcome, outcome
from kafka_policy_proxy.policy.judge import judge_admin
from kafka_policy_proxy.policy.loader import PolicyError, load_policy
from kafka_policy_proxy.policy.model import Mode, Principal

POLICY = load_policy(
    """
version: 1
rules:
  - {name: bounds, partitions: {max: 100}}
admin_apis:
  - name: platform
    principals: ['User:platform-admin']
    apis: ['*']
  - name: acl-operators
    principals: ['User:acl-*', 'User:security']
    apis: [CreateAcls, DeleteAcls]
"""
)


def call(api: str, principal: str, policy: object = POLICY) -> tuple[bool, str | None, str]:
    decision = judge_admin(policy, AdminRequest(api, Principal(principal)))  # type: ignore[arg-type]
    return decision.allowed, decision.rule, decision.message


@pytest.mark.parametrize(
    ("api", "principal", "rule"),
    [
        ("AlterUserScramCredentials", "User:platform-admin", "platform"),
        ("ElectLeaders", "User:platform-admin", "platform"),
        ("CreateAcls", "User:acl-bot", "acl-operators"),
        ("DeleteAcls", "User:security", "acl-operators"),
    ],
)
def test_a_listed_principal_may_call_a_listed_api(api: str, principal: str, rule: str) -> None:
    assert call(api, principal) == (True, rule, "")


@pytest.mark.parametrize(
    ("api", "principal"),
    [
        ("AlterUserScramCredentials", "User:ANONYMOUS"),
        ("AlterUserScramCredentials", "User:acl-bot"),
        ("CreateAcls", "User:platform-admin2"),
        ("CreateAcls", "user:acl-bot"),  # principals are case-sensitive, as Kafka's
        ("ElectLeaders", "User:security"),
    ],
)
def test_anything_else_is_denied_naming_the_rule(api: str, principal: str) -> None:
    allowed, rule, message = call(api, principal)
    assert not allowed and rule is None
    assert message.startswith(f"[{ADMIN_APIS_RULE}] {principal} may not call {api}")


def test_no_admin_apis_section_denies_every_admin_api() -> None:
    policy = load_policy("version: 1\nrules: [{name: r, partitions: {max: 9}}]\n")
    assert not call("CreateAcls", "User:admin", policy)[0]


def test_a_dry_run_records_would_deny_and_lets_it_through() -> None:
    policy = load_policy("version: 1\ndry_run: true\nenforce: nothing\n")
    decision = judge_admin(policy, AdminRequest("ElectLeaders", Principal("User:x")))
    assert decision.allowed and decision.mode is Mode.AUDIT
    assert outcome(decision) is Outcome.AUDIT_WOULD_DENY
    assert decision.message == ""


def _admin_rule(principals: str, apis: str) -> str:
    rule = f"{{name: x, principals: {principals}, apis: {apis}}}"
    return f"version: 1\nenforce: nothing\nadmin_apis:\n  - {rule}\n"


@pytest.mark.parametrize("api", ["CreateTopics", "CreateAcl", "Produce"])
def test_only_cluster_mutation_apis_can_be_listed(api: str) -> None:
    with pytest.raises(PolicyError, match="not a cluster or security mutation API"):
        load_policy(_admin_rule("['User:a']", f"[{api}]"))


def test_a_rule_needs_principals_and_apis() -> None:
    load_policy(_admin_rule("['User:a']", "['*']"))
    with pytest.raises(PolicyError, match="principals"):
        load_policy(_admin_rule("[]", "['*']"))
    with pytest.raises(PolicyError, match="apis"):
        load_policy(_admin_rule("['User:a']", "[]"))
