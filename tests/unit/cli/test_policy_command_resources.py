"""`policy eval` and `policy test` on config resources that are not topics: brokers, the cluster
default, loggers, groups and client metrics, judged by the judge the proxy uses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kafka_policy_proxy.cli.policy_command import main
from kafka_policy_proxy.codec.topic_view import ConfigResourceItem
from kafka_policy_proxy.policy.judge import ClusterFacts, judge_broker_configs
from kafka_policy_proxy.policy.loader import PolicyError, load_policy
from kafka_policy_proxy.policy.model import Principal
from kafka_policy_proxy.policy.offline.cluster_spec import ClusterSpec
from kafka_policy_proxy.policy.offline.scenario import (
    build_resource_requests,
    evaluate_resources,
    parse_cluster,
    parse_request,
    resource_key,
)
from kafka_policy_proxy.proxy.filters.topic_requests import config_resource_request

ROOT = Path(__file__).resolve().parents[3]
POLICY = ROOT / "examples/policy.yaml"

CLUSTER = """
brokers: 3
defaults: {retention.ms: "604800000", cleanup.policy: delete, min.insync.replicas: "2"}
topics:
  - {name: orders.v1, partitions: 12, replication_factor: 3}
  - {name: payments.v1, partitions: 12, replication_factor: 3}
  - name: audit.v1
    partitions: 12
    replication_factor: 3
    configs: {retention.ms: "86400000"}
    overrides: [retention.ms]
"""
NINETY_DAYS = """
operation: incremental_alter_configs
principal: User:platform-admin
resources:
  - type: broker
    name: ""
    changes: [{name: log.retention.ms, op: SET, value: 7776000000}]
"""


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["policy", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def evaluate(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    request: str,
    *options: str,
    cluster: str = CLUSTER,
) -> tuple[int, str, str]:
    (tmp_path / "req.yaml").write_text(request)
    (tmp_path / "cluster.yaml").write_text(cluster)
    argv = ["--request", str(tmp_path / "req.yaml"), "--cluster", str(tmp_path / "cluster.yaml")]
    return run(capsys, "eval", str(POLICY), *argv, *options)


def test_a_new_default_names_the_inheriting_topics_it_puts_outside_the_rules(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, _ = evaluate(capsys, tmp_path, NINETY_DAYS)
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == "cluster default: DENIED"
    assert lines[1].startswith(
        "  [inherited-defaults] the new default log.retention.ms=7776000000 on the cluster "
        "default would put 2 topics that inherit it outside the topic rules: orders.v1 "
        "([retention-bounds] topic 'orders.v1' "
    )
    # audit.v1 sets its own retention.ms: the new default does not reach it.
    assert lines[2:] == [
        "  granted by: platform-tunes-brokers",
        "  outside the topic rules: orders.v1, payments.v1",
    ]


def test_without_overrides_every_config_counts_as_inherited(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cluster = CLUSTER.replace("    overrides: [retention.ms]\n", "")
    _, out, _ = evaluate(capsys, tmp_path, NINETY_DAYS, cluster=cluster)
    assert "  outside the topic rules: audit.v1, orders.v1, payments.v1" in out.splitlines()


def test_a_value_within_the_topic_rules_is_allowed_with_its_granting_rule(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    request = NINETY_DAYS.replace("7776000000", "1209600000")
    code, out, _ = evaluate(capsys, tmp_path, request)
    assert (code, out) == (0, "cluster default: ALLOWED\n  granted by: platform-tunes-brokers\n")


def test_topics_and_other_resources_of_one_request_are_each_decided(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    request = """
operation: incremental_alter_configs
principal: User:alice
topics:
  - {name: orders.v1, changes: [{name: retention.ms, value: 86400000}]}
resources:
  - {type: broker_logger, name: 1, changes: [{name: kafka.server, value: DEBUG}]}
  - {type: group, name: orders-app, changes: [{name: consumer.session.timeout.ms, value: 45000}]}
"""
    code, out, _ = evaluate(capsys, tmp_path, request)
    assert code == 1
    assert out.splitlines() == [
        "orders.v1: ALLOWED",
        "broker logger 1: DENIED",
        "  [broker-configs] User:alice may not change kafka.server on broker logger '1': "
        "no broker_configs rule of the policy allows it",
        "group orders-app: DENIED",
        "  [broker-configs] User:alice may not change consumer.session.timeout.ms on group "
        "'orders-app': no broker_configs rule of the policy allows it",
    ]


def test_json_has_one_record_per_resource(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, _ = evaluate(capsys, tmp_path, NINETY_DAYS, "--json")
    assert code == 1
    record = json.loads(out)
    decision = record["decision"]
    assert decision["resource"] == "cluster default"
    assert decision["allowed"] is False
    assert [v["rule"] for v in decision["violations"]] == ["inherited-defaults"]
    assert decision["rules"] == ["platform-tunes-brokers"]
    assert decision["outside"] == ["orders.v1", "payments.v1"]
    assert record["request"]["config_resource"] == "cluster_default"
    assert record["request"]["changes"] == [
        {"name": "log.retention.ms", "op": "SET", "value": "7776000000"}
    ]


def test_legacy_alter_configs_replaces_the_resource_and_needs_a_star_grant(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    request = """
operation: alter_configs
principal: User:platform-admin
validate_only: true
resources:
  - {type: broker, name: "1", configs: {num.io.threads: 16}}
  - {type: broker_logger, name: "1", configs: {kafka.server: DEBUG}}
"""
    code, out, _ = evaluate(capsys, tmp_path, request)
    assert code == 1
    assert "broker 1: DENIED\n  [broker-configs] the legacy AlterConfigs replaces" in out
    assert "broker logger 1: ALLOWED\n  granted by: platform-loggers\n" in out
    spec = parse_request(request)
    assert [(r.replace, r.validate_only) for r in build_resource_requests(spec)] == [
        (True, True),
        (True, True),
    ]


def test_the_described_resources_are_what_the_proxy_builds_from_the_wire() -> None:
    spec = parse_request(
        """
operation: incremental_alter_configs
principal: User:ops
client_id: cli
client_address: 10.0.0.1
resources:
  - {type: broker, name: "", changes: [{name: log.retention.ms, value: 1}]}
  - {type: broker, name: "2", changes: [{name: num.io.threads, op: DELETE}]}
  - {type: broker_logger, name: "2", changes: [{name: kafka.server, value: INFO}]}
  - {type: client_metrics, name: sub, changes: [{name: metrics, op: APPEND, value: a}]}
  - {type: group, name: g, changes: [{name: share.record.lock.duration.ms, value: 30000}]}
"""
    )
    wire_types = [4, 4, 8, 16, 32]  # Kafka's ConfigResource.Type ids
    principal = Principal("User:ops", "cli", "10.0.0.1")
    from_wire = [
        config_resource_request(
            ConfigResourceItem(
                index=i,
                resource_type=wire_type,
                name=r.name,
                ops=tuple((c.name, c.op.value, c.value) for c in r.changes),
                replace=False,
            ),
            principal,
            validate_only=False,
        )
        for i, (wire_type, r) in enumerate(zip(wire_types, spec.resources, strict=True))
    ]
    assert build_resource_requests(spec) == from_wire
    assert [resource_key(r) for r in build_resource_requests(spec)] == [
        "cluster default",
        "broker 2",
        "broker logger 2",
        "client metrics sub",
        "group g",
    ]


def test_cluster_default_and_a_broker_without_a_name_are_the_same_resource() -> None:
    policy = load_policy(POLICY.read_text(), str(POLICY))
    cluster = parse_cluster(CLUSTER).build()
    by_type = parse_request(
        NINETY_DAYS.replace('type: broker\n    name: ""', "type: cluster_default")
    )
    as_kafka = parse_request(NINETY_DAYS)
    assert build_resource_requests(by_type) == build_resource_requests(as_kafka)
    # The offline result is the judge's, over the described cluster.
    direct = judge_broker_configs(policy, build_resource_requests(as_kafka), ClusterFacts(cluster))
    assert evaluate_resources(policy, as_kafka, cluster) == direct
    assert evaluate_resources(policy, by_type, cluster) == direct


def test_topic_only_requests_have_no_other_resources() -> None:
    spec = parse_request("operation: create_topics\ntopics: [{name: a.b}]\n")
    assert build_resource_requests(spec) == []
    assert evaluate_resources(load_policy(POLICY.read_text()), spec, ClusterSpec().build()) == []


@pytest.mark.parametrize(
    ("resources", "problem"),
    [
        ("[{type: cluster_default, name: '1', changes: []}]", "the cluster default has no name"),
        ("[{type: topic, name: a.b, changes: []}]", "Input should be 'cluster_default'"),
        (
            "[{type: cluster_default, changes: []}, {type: broker, name: '', changes: []}]",
            "the cluster default is named twice",
        ),
        (
            "[{type: group, name: g, changes: []}, {type: group, name: g, changes: []}]",
            "group 'g' is named twice",
        ),
    ],
)
def test_a_resource_kafka_would_not_take_is_refused(resources: str, problem: str) -> None:
    with pytest.raises(PolicyError, match="invalid request") as raised:
        parse_request(f"operation: incremental_alter_configs\nresources: {resources}\n")
    assert problem in str(raised.value)


def test_an_override_needs_a_value_of_its_own(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cluster = CLUSTER.replace("overrides: [retention.ms]", "overrides: [retention.ms, segment.ms]")
    code, out, err = evaluate(capsys, tmp_path, NINETY_DAYS, cluster=cluster)
    assert (code, out) == (2, "")
    assert "topics[2]: overrides without a value in `configs`: segment.ms" in err
    built = parse_cluster(CLUSTER).build()
    assert [(t.name, t.overrides) for t in built.topics] == [
        ("orders.v1", None),
        ("payments.v1", None),
        ("audit.v1", frozenset({"retention.ms"})),
    ]


def test_suite_cases_expect_decisions_of_resources_by_their_printed_names(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cases = tmp_path / "cases.yaml"
    cases.write_text(
        "cluster:\n"
        + "".join(f"  {line}\n" for line in CLUSTER.strip().splitlines())
        + """cases:
  - name: ninety days
    request:
      operation: incremental_alter_configs
      principal: User:platform-admin
      resources:
        - type: cluster_default
          changes: [{name: log.retention.ms, value: 7776000000}]
    expect:
      cluster default:
        allowed: false
        violations: [inherited-defaults]
        message_contains: "payments.v1 ([retention-bounds]"
  - name: wrong expectations
    request:
      operation: incremental_alter_configs
      principal: User:platform-admin
      resources: [{type: broker, name: "1", changes: [{name: num.io.threads, value: 8}]}]
    expect:
      broker 1: {allowed: false, message_contains: "nope"}
      broker 2: {allowed: true}
"""
    )
    code, out, _ = run(capsys, "test", str(POLICY), str(cases))
    assert code == 1
    assert "PASS  ninety days\n" in out
    assert out.split("FAIL  wrong expectations\n")[1].splitlines() == [
        "      broker 1: expected denied, got allowed",
        "      broker 1: no message contains 'nope'",
        "      broker 2: no decision (the request does not name this topic or resource)",
        "      broker 1: ALLOWED",
        "        granted by: platform-tunes-brokers",
        "1 passed, 1 failed",
    ]
