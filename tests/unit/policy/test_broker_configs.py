"""Non-topic config resources: denied by default, granted per principal, resource and key, and a
new topic-config default checked against every topic that inherits it."""

from __future__ import annotations

import pytest

from kafka_policy_proxy.policy.broker_configs import (
    BROKER_CONFIGS_RULE,
    INHERITED_RULE,
    BrokerConfigDecision,
    BrokerConfigRequest,
    ConfigResource,
)
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.decision_log import (
    DecisionRecord,
    Outcome,
    Stamp,
    broker_config_record,
    outcome,
)
from kafka_policy_proxy.policy.judge import (
    CLUSTER_STATE_RULE,
    NO_FACTS,
    BrokerConfigJudgement,
    ClusterFacts,
    FactsUnavailable,
    judge_broker_configs,
)
from kafka_policy_proxy.policy.loader import PolicyError, load_policy
from kafka_policy_proxy.policy.model import (
    ConfigChange,
    ConfigMap,
    ConfigOp,
    Mode,
    Principal,
    TopicState,
)

RULES = """
version: 1
rules:
  - name: retention-bounds
    match: {except_principals: ['User:streams-*']}
    configs:
      retention.ms: {min: 1h, max: 30d}
  - name: cleanup-policy
    configs:
      cleanup.policy: {values: [delete, compact], immutable: true}
  - name: durability
    configs:
      min.insync.replicas: {min: 2}
broker_configs:
  - name: platform-defaults
    principals: ['User:platform-*']
    resources: [cluster_default, broker]
    keys: ['log.retention.ms', 'log.cleanup.policy', 'num.io.threads', 'log.cleaner.*']
    configs:
      num.io.threads: {min: 4, max: 64}
  - name: loggers
    principals: ['User:platform-admin']
    resources: [broker_logger]
    keys: ['*']
"""
POLICY = load_policy(RULES)
DAY_MS = 86_400_000


def topic(name: str, overrides: frozenset[str] | None = frozenset(), **configs: str) -> TopicState:
    effective = {"retention.ms": str(7 * DAY_MS), "cleanup.policy": "delete"} | configs
    return TopicState(
        name=name,
        topic_id=f"id-{name}",
        partitions=3,
        replication_factor=3,
        configs=ConfigMap(effective),
        overrides=overrides,
    )


CLUSTER = InMemoryCluster.of(
    [
        topic("orders.v1"),
        topic("payments.v1"),
        topic("audit.v1", overrides=frozenset({"retention.ms"}), **{"retention.ms": "-1"}),
        topic("clicks.v1", overrides=frozenset({"retention.ms"}), **{"retention.ms": "3600000"}),
    ],
    brokers=3,
    defaults={"retention.ms": str(7 * DAY_MS), "cleanup.policy": "delete"},
)


def request(
    *changes: tuple[str, str, str | None],
    resource: ConfigResource = ConfigResource.CLUSTER_DEFAULT,
    name: str = "",
    principal: str = "User:platform-admin",
    replace: bool = False,
) -> BrokerConfigRequest:
    return BrokerConfigRequest(
        resource,
        name,
        Principal(principal),
        tuple(ConfigChange(k, ConfigOp(op), v) for k, op, v in changes),
        replace=replace,
    )


def decide(req: BrokerConfigRequest, policy: object = POLICY) -> BrokerConfigDecision:
    (decision,) = judge_broker_configs(policy, [req], ClusterFacts(CLUSTER))  # type: ignore[arg-type]
    return decision


def test_a_change_no_rule_grants_is_denied_by_default() -> None:
    decision = decide(request(("log.retention.ms", "SET", "3600000"), principal="User:app"))
    assert not decision.allowed
    assert [v.rule for v in decision.violations] == [BROKER_CONFIGS_RULE]
    assert "User:app may not change log.retention.ms on the cluster default" in decision.message


def test_a_policy_without_broker_configs_denies_every_broker_change() -> None:
    bare = load_policy("version: 1\nrules: [{name: r, partitions: {max: 10}}]\n")
    for resource, name in [
        (ConfigResource.CLUSTER_DEFAULT, ""),
        (ConfigResource.BROKER, "1"),
        (ConfigResource.BROKER_LOGGER, "1"),
        (ConfigResource.GROUP, "g"),
        (ConfigResource.CLIENT_METRICS, "m"),
    ]:
        req = request(("anything", "SET", "1"), resource=resource, name=name)
        assert not decide(req, bare).allowed, resource


def test_a_granted_key_within_bounds_is_allowed_and_names_the_rule() -> None:
    decision = decide(request(("num.io.threads", "SET", "16"), resource=ConfigResource.BROKER))
    assert decision.allowed and decision.rules == ("platform-defaults",)
    assert decision.violations == ()


def test_bounds_refuse_a_value_and_a_removal() -> None:
    high = decide(request(("num.io.threads", "SET", "128")))
    assert not high.allowed
    assert "[platform-defaults] num.io.threads would be 128; the limit is 64" in high.message
    removed = decide(request(("num.io.threads", "DELETE", None)))
    assert not removed.allowed and "set it within the bounds instead" in removed.message


def test_one_ungranted_key_denies_the_whole_resource() -> None:
    decision = decide(request(("num.io.threads", "SET", "8"), ("log.segment.bytes", "SET", "1")))
    assert not decision.allowed
    assert "may not change log.segment.bytes" in decision.message


def test_resources_and_principals_are_separate_grants() -> None:
    logger = request(("kafka.server", "SET", "DEBUG"), resource=ConfigResource.BROKER_LOGGER)
    assert decide(logger).allowed
    assert not decide(request(("kafka.server", "SET", "DEBUG"))).allowed  # not a logger grant
    other = request(
        ("kafka.server", "SET", "DEBUG"),
        resource=ConfigResource.BROKER_LOGGER,
        principal="User:platform-ops",
    )
    assert not decide(other).allowed


def test_legacy_replacement_needs_a_rule_that_grants_every_key() -> None:
    replace = request(("num.io.threads", "SET", "8"), replace=True)
    decision = decide(replace)
    assert not decision.allowed and "only a rule granting all keys" in decision.message
    logger = request(
        ("kafka.server", "SET", "INFO"), resource=ConfigResource.BROKER_LOGGER, replace=True
    )
    assert decide(logger).allowed


def test_a_new_default_that_puts_inheriting_topics_outside_the_rules_is_denied() -> None:
    decision = decide(request(("log.retention.ms", "SET", str(90 * DAY_MS))))
    assert not decision.allowed
    # audit.v1 and clicks.v1 override retention.ms: they do not inherit the default.
    assert decision.outside == ("orders.v1", "payments.v1")
    (violation,) = decision.violations
    assert violation.rule == INHERITED_RULE
    assert "would put 2 topics that inherit it outside the topic rules" in violation.message
    assert "orders.v1 ([retention-bounds]" in violation.message
    assert "the limit is 2592000000 (30d)" in violation.message


def test_a_new_default_within_the_topic_rules_is_allowed() -> None:
    decision = decide(request(("log.retention.ms", "SET", str(14 * DAY_MS))))
    assert decision.allowed, decision.message
    assert decision.outside == ()


def test_a_default_change_cannot_change_an_immutable_topic_config() -> None:
    appended = decide(request(("log.cleanup.policy", "APPEND", "compact")))
    assert not appended.allowed
    assert "cannot change after the topic is created" in appended.message
    # Every topic inherits cleanup.policy (audit.v1 and clicks.v1 override retention.ms only).
    assert appended.outside == ("audit.v1", "clicks.v1", "orders.v1", "payments.v1")


def test_the_message_names_the_first_three_topics_and_counts_the_rest() -> None:
    many = InMemoryCluster.of([topic(f"t{i}.v1") for i in range(7)], 3, CLUSTER.defaults)
    req = request(("log.retention.ms", "SET", "60000"))
    (decision,) = judge_broker_configs(POLICY, [req], ClusterFacts(many))
    assert decision.outside == tuple(f"t{i}.v1" for i in range(7))
    assert "t0.v1 (" in decision.message and "t2.v1 (" in decision.message
    assert "t3.v1 (" not in decision.message and "; and 4 more" in decision.message


def test_topics_already_outside_a_rule_do_not_block_an_unrelated_default() -> None:
    legacy = topic("legacy.v1", **{"min.insync.replicas": "1"})
    cluster = InMemoryCluster.of([legacy], 3, CLUSTER.defaults)
    req = request(("log.retention.ms", "SET", str(14 * DAY_MS)))
    (decision,) = judge_broker_configs(POLICY, [req], ClusterFacts(cluster))
    assert decision.allowed, decision.message


def test_the_principal_selectors_of_topic_rules_apply_to_who_changes_the_default() -> None:
    streams = load_policy(
        RULES.replace("principals: ['User:platform-*']", "principals: ['User:streams-admin']")
    )
    req = request(("log.retention.ms", "SET", str(90 * DAY_MS)), principal="User:streams-admin")
    assert decide(req, streams).allowed  # retention-bounds excepts User:streams-*


def test_units_of_lower_precedence_synonyms_are_converted() -> None:
    hours = load_policy(
        RULES.replace("'log.retention.ms',", "'log.retention.ms', 'log.retention.hours',")
    )
    decision = decide(request(("log.retention.hours", "SET", str(90 * 24))), hours)
    assert not decision.allowed and decision.outside == ("orders.v1", "payments.v1")


def test_removing_a_default_that_topic_rules_bound_is_denied() -> None:
    decision = decide(request(("log.retention.ms", "DELETE", None)))
    assert not decision.allowed
    assert "removing the retention.ms default on the cluster default" in decision.message
    assert decide(request(("log.cleaner.threads", "DELETE", None))).allowed


def test_a_dry_run_records_what_it_would_deny_and_lets_it_through() -> None:
    dry = load_policy("dry_run: true\nenforce: nothing\n" + RULES.replace("version: 1\n", ""))
    decision = decide(request(("log.retention.ms", "SET", str(90 * DAY_MS))), dry)
    assert decision.allowed and decision.mode is Mode.AUDIT
    assert outcome(decision) is Outcome.AUDIT_WOULD_DENY


def test_the_query_asks_for_every_topic_only_when_a_granted_default_changes() -> None:
    topics = BrokerConfigJudgement(POLICY, [request(("log.retention.ms", "SET", "3600000"))])
    assert topics.query.all_topics and topics.query.facts
    threads = BrokerConfigJudgement(POLICY, [request(("num.io.threads", "SET", "8"))])
    assert not threads.query.facts
    denied = BrokerConfigJudgement(
        POLICY, [request(("log.retention.ms", "SET", "3600000"), principal="User:app")]
    )
    assert not denied.query.facts  # denied by the grants alone: nothing to read


def test_a_default_no_topic_rule_checks_needs_no_topics() -> None:
    # No rule bounds segment.bytes: no topic's verdict can change, so none is read.
    policy = load_policy(RULES.replace("'log.cleaner.*'", "'log.cleaner.*', log.segment.bytes"))
    segments = BrokerConfigJudgement(policy, [request(("log.segment.bytes", "SET", "1048576"))])
    assert not segments.query.facts
    assert segments.decide(NO_FACTS)[0].allowed


def test_unreadable_topics_deny_the_default_change_and_only_it() -> None:
    class Down:
        def read(self, query: object) -> object:
            raise FactsUnavailable("timed out")

    defaults = request(("log.retention.ms", "SET", "3600000"))
    threads = request(("num.io.threads", "SET", "8"))
    first, second = judge_broker_configs(POLICY, [defaults, threads], Down())  # type: ignore[arg-type]
    assert not first.allowed and first.violations[-1].rule == CLUSTER_STATE_RULE
    assert second.allowed


def test_the_record_is_a_valid_alter_broker_config_event() -> None:
    decision = decide(request(("log.retention.ms", "SET", str(90 * DAY_MS))))
    record = broker_config_record(
        decision,
        Stamp(
            time="2026-11-23T00:00:00.000000Z",
            decision_id="d",
            policy_revision=POLICY.revision,
            cluster_id=None,
            proxy_id="p",
            conn=1,
            client="127.0.0.1:1",
            api="IncrementalAlterConfigs",
            api_key=44,
            api_version=1,
        ),
    )
    parsed = DecisionRecord.model_validate(record)
    assert parsed.resource_type == "cluster" and parsed.resource == ""
    assert record["action"] == "alter_broker_config" and record["decision"] == "denied"
    assert record["request"]["outside"] == ["orders.v1", "payments.v1"]
    assert BrokerConfigRequest.from_dict(record["request"]) == decision.request


@pytest.mark.parametrize(
    ("snippet", "error"),
    [
        ("configs: {num.io.threads: {required: true}}", "apply to topic configs only"),
        ("configs: {log.segment.bytes: {max: 1}}", "is bounded here but not granted"),
        ("resources: [topic]", "resources"),
    ],
)
def test_bad_rules_are_refused_naming_the_key(snippet: str, error: str) -> None:
    text = f"""
version: 1
rules: [{{name: r, partitions: {{max: 10}}}}]
broker_configs:
  - name: b
    principals: ['User:x']
    keys: ['num.io.threads']
    {snippet if snippet.startswith("resources") else "resources: [broker]"}
    {snippet if not snippet.startswith("resources") else ""}
"""
    with pytest.raises(PolicyError, match=error) as info:
        load_policy(text)
    assert "broker_configs" in str(info.value)


def test_only_what_the_new_default_adds_blocks_it() -> None:
    # A rule that denies every alter of payments.v1 denies it before and after alike.
    text = (
        RULES.replace(
            "rules:\n",
            "rules:\n  - {name: frozen, match: {topic: 'payments[.].*', actions: [alter]}, "
            "deny: true}\n",
        )
        + """
  - name: segments
    principals: ['User:platform-admin']
    resources: [cluster_default]
    keys: [log.segment.bytes]
"""
    )
    policy = load_policy(text)
    assert decide(request(("log.segment.bytes", "SET", "1048576")), policy).allowed
    retention = decide(request(("log.retention.ms", "SET", str(14 * DAY_MS))), policy)
    assert retention.allowed, retention.message
