"""The policy's `owners:` map: validated naming the key, and which team owns a topic."""

from __future__ import annotations

import pytest

from kafka_policy_proxy.policy.loader import PolicyError, load_policy, parse_document
from kafka_policy_proxy.policy.owners import UNOWNED, owner_of
from kafka_policy_proxy.policy.rules import PolicyDocument
from tests.unit.policy.test_example_policies import doc_blocks

RULES = "rules: [{name: no-deletes, match: {actions: [delete]}, deny: true}]\n"
OWNERS = r"""
owners:
  payments-core: {topics: ['payments\.core\..*']}
  payments: {topic_prefixes: [payments., ledger.]}
  data-eng: {topics: ['clicks\..*', 'views'], topic_prefixes: [etl.]}
"""


@pytest.fixture(scope="module")
def document() -> PolicyDocument:
    return parse_document(RULES + OWNERS, "policy.yaml")


@pytest.mark.parametrize(
    ("topic", "team"),
    [
        ("payments.refunds", "payments"),
        ("ledger.entries", "payments"),
        # Listed first, the narrower team wins over the broader prefix.
        ("payments.core.accounts", "payments-core"),
        ("clicks.web", "data-eng"),
        ("etl.staging", "data-eng"),
        ("views", "data-eng"),
        # Regexes match the whole name; prefixes only its start.
        ("views.v2", None),
        ("myclicks.web", None),
        ("ledger", None),
        ("orders.v1", None),
    ],
)
def test_the_first_owner_in_file_order_that_matches_owns_the_topic(
    document: PolicyDocument, topic: str, team: str | None
) -> None:
    assert owner_of(document, topic) == team


def test_file_order_decides_not_the_longest_match() -> None:
    broad_first = parse_document(
        RULES + "owners:\n  all: {topic_prefixes: ['']}\n"
        "  payments: {topic_prefixes: [payments.]}\n"
    )
    assert owner_of(broad_first, "payments.refunds") == "all"
    assert list(broad_first.owners) == ["all", "payments"]


def test_a_policy_without_owners_owns_nothing() -> None:
    assert owner_of(parse_document(RULES), "payments.refunds") is None


def test_no_team_name_can_be_the_unowned_label() -> None:
    with pytest.raises(PolicyError, match=r"owners\.\"\(unowned\)\""):
        parse_document(RULES + f"owners:\n  '{UNOWNED}': {{topic_prefixes: [x.]}}\n")


@pytest.mark.parametrize(
    ("owners", "problem"),
    [
        ("  Payments: {topic_prefixes: [p.]}", 'line 3: owners.Payments."[key]": String should'),
        ("  payments: {topics: ['ok', '(']}", "line 3: owners.payments.topics[1]: not a valid "
         "regular expression"),
        ("  payments: {}", "line 3: owners.payments: an owner needs `topic_prefixes` or `topics`"),
        ("  payments: {topic_prefix: p.}", "line 3: owners.payments.topic_prefix: unknown key"),
        ("  payments: [p.]", "line 3: owners.payments: Input should be"),
    ],
)  # fmt: skip
def test_a_bad_owner_is_refused_naming_the_key(owners: str, problem: str) -> None:
    with pytest.raises(PolicyError) as refused:
        parse_document(RULES + "owners:\n" + owners + "\n", "policy.yaml")
    assert problem in str(refused.value)


def test_the_documented_owners_claim_what_docs_policy_md_says() -> None:
    (block,) = [b for _, b in doc_blocks() if b.startswith("owners:")]
    document = parse_document(RULES + block, "docs/policy.md")
    assert owner_of(document, "payments.core.accounts") == "payments-core"
    assert owner_of(document, "payments.refunds") == "payments"
    assert owner_of(document, "ledger.entries") == "payments"
    assert owner_of(document, "metrics.raw") == "data-eng"
    assert owner_of(document, "orders.v1") is None


def test_a_topic_no_owner_claims_belongs_to_the_budget_that_counts_it() -> None:
    policy = load_policy(
        """
owners:
  payments: {topic_prefixes: [payments.]}
budgets:
  - {name: pay-budget, topic_prefix: pay, max_topics: 9}
  - {name: team-quota, principals: ["User:team-*"], topic_prefix: "{user}.", max_topics: 5}
""",
        "p.yaml",
    )
    document, budgets = policy.document, policy.budgets
    assert owner_of(document, "payments.ledger", budgets) == "payments"  # owners: first
    assert owner_of(document, "payroll.runs", budgets) == "pay-budget"
    assert owner_of(document, "team-a.orders", budgets) == "team-a"  # the user the prefix names
    assert owner_of(document, "other.orders", budgets) is None  # User:other is not a team-*
    assert owner_of(document, "team-a.orders") is None  # without the budgets: owners: alone
