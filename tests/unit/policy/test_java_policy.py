"""java_policy rules: the reference broker policy run through JPype, as the controller calls it."""

from __future__ import annotations

import logging
import pickle
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.java_policies import REFERENCE_CLASS, build_jar, kafka_clients_jar
from kafka_policy_proxy.policy.builders import (
    alter_configs_request,
    create_partitions_request,
    create_request,
    incremental_alter_configs_request,
)
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.java_policy import altered_configs
from kafka_policy_proxy.policy.loader import PolicyError, load_policy
from kafka_policy_proxy.policy.model import ConfigMap, Principal, TopicState

WHO = Principal("User:alice")
CLUSTER = InMemoryCluster()
DEFAULTS = {"num.partitions": "3", "default.replication.factor": "2"}
BROKEN = """
package com.example.policy;
import java.util.Map;
import org.apache.kafka.server.policy.CreateTopicPolicy;
public class Broken implements CreateTopicPolicy {
    public void configure(Map<String, ?> configs) {}
    public void validate(RequestMetadata request) { throw new IllegalStateException("boom"); }
    public void close() {}
}
"""
NOT_A_POLICY = "package com.example.policy;\npublic class Plain {}\n"


@pytest.fixture(scope="module")
def jars(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with reference-policy.jar and broken.jar, and the policy files beside them."""
    folder = tmp_path_factory.mktemp("jars")
    build_jar(folder / "reference-policy.jar")
    build_jar(
        folder / "broken.jar",
        {"com.example.policy.Broken": BROKEN, "com.example.policy.Plain": NOT_A_POLICY},
    )
    return folder


def policy_text(jar: str = "reference-policy.jar", **fields: object) -> str:
    """A policy with one java_policy rule (relative jar paths are read beside the file)."""
    spec = {
        "jar": jar,
        "class": REFERENCE_CLASS,
        "classpath": [str(kafka_clients_jar())],
        "config": {"policy.max.partitions": 6},
        **fields,
    }
    lines = [f"      {key}: {value!r}" for key, value in spec.items()]
    return "version: 1\nrules:\n  - name: broker-policy\n    java_policy:\n" + "\n".join(
        lines
    ).replace("'", '"')


@pytest.fixture()
def policy(jars: Path) -> Iterator[CompiledPolicy]:
    compiled = load_policy(policy_text(), str(jars / "policy.yaml"), base_dir=jars)
    yield compiled
    compiled.close()


def create(name: str, partitions: int = 3, rf: int = 2, **kwargs: object) -> object:
    configs = kwargs.pop("configs", [("retention.ms", "1000")])
    return create_request(
        name, partitions, rf, configs=configs, principal=WHO, defaults=DEFAULTS, **kwargs
    )  # type: ignore[arg-type]


def messages(policy: CompiledPolicy, request: object) -> list[str]:
    return [v.message for v in policy.evaluate(request, CLUSTER).violations]  # type: ignore[arg-type]


def existing(**overrides: str) -> TopicState:
    return TopicState(
        "team.orders",
        partitions=3,
        replication_factor=2,
        configs=ConfigMap({"cleanup.policy": "delete", **overrides}),
        overrides=frozenset(overrides),
    )


def test_create_denials_carry_the_policy_message_verbatim(policy: CompiledPolicy) -> None:
    assert messages(policy, create("team.orders")) == []
    assert messages(policy, create("Orders")) == [
        "Topic name Orders must look like team.dataset (lower case)."
    ]
    assert messages(policy, create("team.orders", 8)) == [
        "Topic team.orders asks for 8 partitions; at most 6 are allowed."
    ]
    assert messages(policy, create("team.orders", rf=1)) == [
        "Topic team.orders has replication factor 1; at least 2 is required."
    ]
    assert messages(policy, create("team.orders", configs=[])) == [
        "Topic team.orders must set retention.ms."
    ]


def test_a_create_with_configs_meets_the_alter_config_policy_first(
    policy: CompiledPolicy,
) -> None:
    # Both checks fail; the controller runs the AlterConfigPolicy on the new topic's configs
    # before the CreateTopicPolicy, and stops at the first failure.
    request = create("Orders", configs=[("retention.ms", "999999999999")])
    assert messages(policy, request) == [
        "retention.ms of Orders is 999999999999; it must be between 0 and 604800000."
    ]


def test_defaults_are_resolved_and_an_assignment_is_passed_as_the_broker_does(
    policy: CompiledPolicy,
) -> None:
    by_default = create_request(
        "team.orders",
        configs=[("retention.ms", "1")],
        principal=WHO,
        defaults={"num.partitions": "9", "default.replication.factor": "2"},
    )
    assert messages(policy, by_default) == [
        "Topic team.orders asks for 9 partitions; at most 6 are allowed."
    ]
    placed = create_request(
        "team.orders",
        assignment=[(0, [1, 2]), (1, [2])],
        configs=[("retention.ms", "1")],
        principal=WHO,
        defaults=DEFAULTS,
    )
    # The reference policy reads the counts from the assignment (null counts passed).
    assert messages(policy, placed) == [
        "Topic team.orders has replication factor 1; at least 2 is required."
    ]


def test_requests_the_broker_refuses_first_are_not_shown_to_the_policy(
    policy: CompiledPolicy,
) -> None:
    assert messages(policy, create("Orders", configs=[("retention.ms", None)])) == []
    assert messages(policy, create("Orders", partitions=0)) == []
    unknown_defaults = create_request("team.orders", principal=WHO, defaults={})
    [message] = messages(policy, unknown_defaults)
    assert message.startswith("[broker-policy] ") and "cannot be asked; denied" in message


def test_config_changes_show_only_what_changes(policy: CompiledPolicy) -> None:
    current = existing(**{"retention.ms": "999999999999"})
    same = incremental_alter_configs_request(
        "team.orders", [("retention.ms", "SET", "999999999999")], principal=WHO, current=current
    )
    assert altered_configs(same) == {}
    assert messages(policy, same) == []
    removed = incremental_alter_configs_request(
        "team.orders", [("retention.ms", "DELETE", None)], principal=WHO, current=current
    )
    assert messages(policy, removed) == ["retention.ms of team.orders may not be removed."]
    compact = incremental_alter_configs_request(
        "team.orders",
        [("cleanup.policy", "SUBTRACT", "delete"), ("cleanup.policy", "APPEND", "compact")],
        principal=WHO,
        current=existing(),
    )
    assert altered_configs(compact) == {"cleanup.policy": "compact"}
    # Legacy AlterConfigs: retention.ms goes back to its default implicitly, which the
    # controller does not show the policy (KAFKA-14195).
    replaced = alter_configs_request(
        "team.orders", [("cleanup.policy", "compact")], principal=WHO, current=current
    )
    assert altered_configs(replaced) == {"cleanup.policy": "compact"}
    assert messages(policy, replaced) == [
        "Topic team.orders may not become compact-only; use compact,delete."
    ]


def test_other_actions_never_reach_the_java_policy(policy: CompiledPolicy) -> None:
    increase = create_partitions_request("Orders", 100, principal=WHO, current=existing())
    assert messages(policy, increase) == []


def test_a_failing_policy_denies_and_logs_the_java_stack_trace(
    jars: Path, caplog: pytest.LogCaptureFixture
) -> None:
    text = policy_text(
        "broken.jar", **{"class": "com.example.policy.Broken", "applies_to": ["create"]}
    )
    compiled = load_policy(text, "broken.yaml", base_dir=jars)
    try:
        with caplog.at_level(logging.ERROR, logger="kafka_policy_proxy.policy.java_policy"):
            decision = compiled.evaluate(create("team.orders"), CLUSTER)
    finally:
        compiled.close()
    assert not decision.allowed
    assert decision.message == (
        "[broker-policy] topic 'team.orders': the Java policy com.example.policy.Broken failed "
        "(java.lang.IllegalStateException: boom); denied"
    )
    assert "com.example.policy.Broken.validate(Broken.java:7)" in caplog.text


@pytest.mark.parametrize(
    ("fields", "where", "reason"),
    [
        ({"jar": "missing.jar"}, "rules[0].java_policy.jar", "no such jar"),
        ({"class": "com.example.policy.Nope"}, "rules[0].java_policy.class", "cannot load"),
        ({"classpath": []}, "rules[0].java_policy.classpath", "kafka-clients"),
        (
            {"jar": "broken.jar", "class": "com.example.policy.Broken"},
            "rules[0].java_policy.applies_to",
            "does not implement org.apache.kafka.server.policy.AlterConfigPolicy",
        ),
        (
            {"jar": "broken.jar", "class": "com.example.policy.Plain", "applies_to": ["create"]},
            "rules[0].java_policy.applies_to",
            "does not implement",
        ),
        ({"applies_to": ["delete"]}, "rules[0].java_policy.applies_to[0]", "Input should be"),
    ],
)
def test_load_errors_name_the_key(
    jars: Path, fields: dict[str, object], where: str, reason: str
) -> None:
    with pytest.raises(PolicyError) as raised:
        load_policy(policy_text(**fields), "p.yaml", base_dir=jars)
    [problem] = raised.value.problems
    assert problem.where == where
    assert reason in problem.reason


def test_a_java_rule_takes_no_other_constraints_and_only_its_actions(jars: Path) -> None:
    with_partitions = policy_text() + "\n    partitions: {max: 3}"
    with pytest.raises(
        PolicyError,
        match=r"rules\[0\].java_policy: a java_policy rule takes no other constraints "
        r"\(partitions\)",
    ):
        load_policy(with_partitions, "p.yaml", base_dir=jars)
    deletes = policy_text() + "\n    match: {actions: [delete]}"
    with pytest.raises(
        PolicyError,
        match=r"rules\[0\].match.actions: a java_policy rule is called for create and "
        r"alter:configs only",
    ):
        load_policy(deletes, "p.yaml", base_dir=jars)


def test_reloading_picks_up_a_new_jar_and_a_new_revision(tmp_path: Path) -> None:
    build_jar(tmp_path / "reference-policy.jar")
    first = load_policy(policy_text(), "p.yaml", base_dir=tmp_path)
    source = (
        Path(__file__).parents[3]
        / "examples/java-policy/src/com/example/policy/ReferencePolicy.java"
    ).read_text()
    build_jar(
        tmp_path / "reference-policy.jar",
        {REFERENCE_CLASS: source.replace("must look like team.dataset", "must be team.dataset")},
    )
    second = load_policy(policy_text(), "p.yaml", base_dir=tmp_path)
    try:
        assert messages(first, create("Orders")) == [
            "Topic name Orders must look like team.dataset (lower case)."
        ]
        assert messages(second, create("Orders")) == [
            "Topic name Orders must be team.dataset (lower case)."
        ]
        assert first.revision != second.revision
    finally:
        first.close()
        second.close()


def test_offline_checks_skip_the_jvm_and_pickling_reloads_the_jar(
    jars: Path, policy: CompiledPolicy
) -> None:
    offline = load_policy(policy_text(), "p.yaml", base_dir=jars, load_plugins=False)
    assert messages(offline, create("Orders")) == []
    copy = pickle.loads(pickle.dumps(policy))
    try:
        assert messages(copy, create("Orders")) == [
            "Topic name Orders must look like team.dataset (lower case)."
        ]
        assert copy.revision == policy.revision
    finally:
        copy.close()


def test_audit_mode_records_without_denying(jars: Path) -> None:
    text = policy_text() + "\n    mode: audit\nenforce: nothing"
    compiled = load_policy(textwrap.dedent(text), "p.yaml", base_dir=jars)
    try:
        decision = compiled.evaluate(create("Orders"), CLUSTER)  # type: ignore[arg-type]
    finally:
        compiled.close()
    assert decision.allowed
    assert [v.rule for v in decision.violations] == ["broker-policy"]


def test_a_closed_java_policy_denies_rather_than_failing(jars: Path) -> None:
    compiled = load_policy(policy_text(), "p.yaml", base_dir=jars)
    compiled.close()
    [message] = messages(compiled, create("team.orders"))
    assert message == (
        "[broker-policy] topic 'team.orders': the Java policy com.example.policy.ReferencePolicy "
        "was closed (a reload replaced it); denied"
    )
