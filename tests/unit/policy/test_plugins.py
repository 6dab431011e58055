"""Plugins: loading by dotted path, violations, fail-closed errors, closing."""

from __future__ import annotations

import logging
import pickle

import pytest

from kafka_policy_proxy.policy import builders
from kafka_policy_proxy.policy.loader import PolicyError, load_policy

from . import plugin_fixtures
from .helpers import ALICE, cluster
from .test_engine import create, decide, messages

HERE = "tests.unit.policy.plugin_fixtures"


def test_plugin_violation_is_reported_with_its_name_after_the_rules() -> None:
    policy = load_policy(
        {
            "rules": [{"name": "max", "partitions": {"max": 4}}],
            "plugins": [{"name": "team", "class": f"{HERE}.OwnerTag", "config": {"team": "pay"}}],
        }
    )
    decision = decide(policy, create("orders", partitions=8), cluster())
    assert messages(decision) == [
        "[max] topic 'orders' asks for 8 partitions; the limit is 4",
        "[team] topic 'orders' must start with 'pay'.",
    ]
    assert decide(policy, create("pay.orders", partitions=2), cluster()).allowed
    policy.close()


def test_plugin_sees_the_cluster_state() -> None:
    policy = load_policy(
        {"plugins": [{"name": "team", "class": f"{HERE}:OwnerTag", "config": {"team": "pay"}}]}
    )
    delete = builders.delete_topic_request("pay.x", principal=ALICE)
    assert not decide(policy, delete, cluster(brokers=2)).allowed
    assert decide(policy, delete, cluster(brokers=3)).allowed


def test_a_failing_plugin_denies_and_logs_the_traceback(caplog: pytest.LogCaptureFixture) -> None:
    policy = load_policy({"plugins": [{"name": "broken", "class": f"{HERE}.Broken"}]})
    with caplog.at_level(logging.ERROR, logger="kafka_policy_proxy.policy.engine"):
        decision = decide(policy, create("orders"), cluster())
    assert not decision.allowed
    assert messages(decision) == [
        "[broken] topic 'orders': the policy plugin failed (KeyError); denied"
    ]
    record = caplog.records[-1]
    assert "broken" in record.getMessage()
    assert record.exc_info is not None and record.exc_info[0] is KeyError


def test_a_failing_audit_plugin_only_records() -> None:
    policy = load_policy(
        {
            "enforce": "nothing",
            "plugins": [{"name": "broken", "class": f"{HERE}.Broken", "mode": "audit"}],
        }
    )
    decision = decide(policy, create("orders"), cluster())
    assert decision.allowed
    assert [v.rule for v in decision.violations] == ["broken"]


def test_plugins_are_closed_and_recreated_on_unpickling() -> None:
    plugin_fixtures.CLOSED.clear()
    spec = {"name": "team", "class": f"{HERE}.OwnerTag", "config": {"team": "ops"}}
    policy = load_policy({"plugins": [spec]})
    again = pickle.loads(pickle.dumps(policy))
    assert not decide(again, create("orders"), cluster()).allowed
    policy.close()
    again.close()
    assert plugin_fixtures.CLOSED == ["ops", "ops"]


def test_plugin_selector_and_declared_needs() -> None:
    policy = load_policy(
        {
            "plugins": [
                {
                    "name": "team",
                    "class": f"{HERE}.OwnerTag",
                    "config": {"team": "pay"},
                    "match": {"actions": ["create"]},
                    "needs": ["broker_count"],
                }
            ]
        }
    )
    assert decide(
        policy, builders.delete_topic_request("x", principal=ALICE), cluster(brokers=1)
    ).allowed
    assert policy.needs(create("x")) == {"broker_count"}


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        (f"{HERE}.Missing", "is not a subclass of policy.plugins.PolicyPlugin"),
        (f"{HERE}.NotAPlugin", "is not a subclass of policy.plugins.PolicyPlugin"),
        ("no_such_module_xyz.Plugin", "cannot import 'no_such_module_xyz'"),
        (f"{HERE}.FailsToStart", "failed to start: RuntimeError: no database"),
        ("Plugin", "is not a dotted path to a class"),
    ],
)
def test_plugin_load_errors_name_the_path(path: str, reason: str) -> None:
    with pytest.raises(PolicyError) as caught:
        load_policy(
            {
                "plugins": [
                    {"name": "ok", "class": f"{HERE}.Broken"},
                    {"name": "bad", "class": path},
                ]
            },
            "p.yaml",
        )
    problem = caught.value.problems[0]
    assert problem.where == "plugins[1].class"
    assert reason in problem.reason


def test_plugins_can_be_skipped_for_offline_checks() -> None:
    policy = load_policy(
        {"plugins": [{"name": "x", "class": f"{HERE}.FailsToStart"}]}, load_plugins=False
    )
    assert decide(policy, create("orders"), cluster()).allowed
