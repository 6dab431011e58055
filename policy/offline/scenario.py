"""Test cases and suites for the offline tools (`policy eval/test`), and judging what they
describe: the requests (request_spec.py) over a cluster (cluster_spec.py).

A described request mirrors one Kafka admin API call: it is built with the proxy's builders
and judged as one batch by the one judge (`policy.judge`) over the described cluster, so an
offline result is what the proxy would decide with the same cluster facts. The config
resources that are not topics (brokers, the cluster default, loggers, groups, client metrics)
are judged by the judge's `judge_broker_configs`, as the proxy judges them.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import AwareDatetime, Field, TypeAdapter, ValidationError

from kafka_policy_proxy.policy import builders
from kafka_policy_proxy.policy.broker_configs import (
    BrokerConfigDecision,
    BrokerConfigRequest,
    ConfigResource,
)
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.judge import ClusterFacts, Verdict, judge, judge_broker_configs
from kafka_policy_proxy.policy.loader import PolicyError, Problem, parse_source, validation_problems
from kafka_policy_proxy.policy.model import ConfigChange, ConfigOp, Principal, TopicRequest
from kafka_policy_proxy.policy.offline.cluster_spec import ClusterSpec
from kafka_policy_proxy.policy.offline.request_spec import (
    AlterConfigsSpec,
    AlterResourceConfigs,
    AutoCreateSpec,
    CreatePartitionsSpec,
    CreateTopicsSpec,
    DeleteTopicsSpec,
    IncrementalAlterConfigsSpec,
    IncrementalResourceConfigs,
    ReassignSpec,
    RequestSpec,
    Strict,
)


class Expectation(Strict):
    """What a test case expects for one topic or other config resource."""

    allowed: bool | None = None
    violations: list[str] | None = Field(
        default=None, description="the violated rule names, in order (audit ones included)"
    )
    message_contains: str | None = None
    waived: list[str] | None = Field(
        default=None, description="the rule names exceptions waived, in order"
    )


class Case(Strict):
    """One case: a request, an optional cluster, and the expected decision per topic or
    resource (named as `resource_key` names it: "cluster default", "broker 1")."""

    name: str
    request: RequestSpec
    cluster: ClusterSpec | None = None
    now: AwareDatetime | None = Field(
        default=None,
        description="the instant of judgement (RFC 3339 with an offset or Z), which decides "
        "the exceptions in force; the suite's run time (`--now`, else the clock) if absent",
    )
    expect: dict[str, Expectation]


class Suite(Strict):
    """A suite of cases sharing a default cluster."""

    cluster: ClusterSpec = Field(default_factory=ClusterSpec)
    cases: list[Case] = Field(min_length=1)


_REQUEST = TypeAdapter[RequestSpec](RequestSpec)
_OPERATIONS = frozenset(
    {
        "create_topics",
        "auto_create",
        "alter_configs",
        "incremental_alter_configs",
        "create_partitions",
        "alter_partition_reassignments",
        "delete_topics",
        "delete_records",
    }
)


def _validate(adapter_or_model: Any, source: str | Mapping[str, Any], name: str, what: str) -> Any:
    data, node = parse_source(source, name, what)
    try:
        if isinstance(adapter_or_model, TypeAdapter):
            return adapter_or_model.validate_python(data)
        return adapter_or_model.model_validate(data)
    except ValidationError as exc:
        problems = validation_problems(exc, node)
        raise PolicyError(name, _drop_tags(problems), what) from None


def _drop_tags(problems: list[Problem]) -> list[Problem]:
    # A discriminated union puts its tag ('create_topics') in the path; the file has no such key.
    return [
        Problem(
            tuple(p for p in problem.path if p not in _OPERATIONS), problem.reason, problem.line
        )
        for problem in problems
    ]


def parse_request(source: str | Mapping[str, Any], name: str = "<request>") -> RequestSpec:
    """Parse and validate a described request."""
    spec: RequestSpec = _validate(_REQUEST, source, name, "request")
    return spec


def parse_cluster(source: str | Mapping[str, Any], name: str = "<cluster>") -> ClusterSpec:
    """Parse and validate a described cluster state."""
    spec: ClusterSpec = _validate(ClusterSpec, source, name, "cluster state")
    return spec


def parse_suite(source: str | Mapping[str, Any], name: str = "<tests>") -> Suite:
    """Parse and validate a test suite."""
    suite: Suite = _validate(Suite, source, name, "test suite")
    return suite


def build_requests(spec: RequestSpec, cluster: InMemoryCluster) -> list[TopicRequest]:
    """The per-topic requests the proxy would judge, built without cluster facts.

    A Metadata request auto-creates only the topics that do not exist: the proxy judges
    those names alone, and so does this.
    """
    who = Principal(spec.principal, spec.client_id, spec.client_address)
    only = spec.validate_only
    if isinstance(spec, CreateTopicsSpec):
        return [
            builders.create_request(
                t.name,
                t.partitions,
                t.replication_factor,
                None if t.assignment is None else list(t.assignment.items()),
                list(t.configs.items()),
                principal=who,
                validate_only=only,
            )
            for t in spec.topics
        ]
    if isinstance(spec, AutoCreateSpec):
        missing = dict.fromkeys(t.name for t in spec.topics if cluster.topic(t.name) is None)
        return [builders.create_request(name, principal=who) for name in missing]
    if isinstance(spec, AlterConfigsSpec):
        return [
            builders.alter_configs_request(
                t.name, list(t.configs.items()), principal=who, validate_only=only
            )
            for t in spec.topics
        ]
    if isinstance(spec, IncrementalAlterConfigsSpec):
        return [
            builders.incremental_alter_configs_request(
                t.name,
                [(c.name, c.op, c.value) for c in t.changes],
                principal=who,
                validate_only=only,
            )
            for t in spec.topics
        ]
    if isinstance(spec, CreatePartitionsSpec):
        return [
            builders.create_partitions_request(
                t.name, t.count, t.assignment, principal=who, validate_only=only
            )
            for t in spec.topics
        ]
    if isinstance(spec, ReassignSpec):
        return [
            builders.reassignment_request(t.name, list(t.partitions.items()), principal=who)
            for t in spec.topics
        ]
    if isinstance(spec, DeleteTopicsSpec):
        return [
            builders.delete_topic_request(t.name, t.topic_id, principal=who) for t in spec.topics
        ]
    return [
        builders.delete_records_request(t.name, list(t.offsets.items()), principal=who)
        for t in spec.topics
    ]


def evaluate_spec(
    policy: CompiledPolicy,
    spec: RequestSpec,
    cluster: InMemoryCluster,
    *,
    now: datetime | None = None,
) -> list[Verdict]:
    """Judge a described request as the proxy judges one wire request: as one batch, at the
    instant `now`."""
    return judge(policy, build_requests(spec, cluster), ClusterFacts(cluster), now=now)


def build_resource_requests(spec: RequestSpec) -> list[BrokerConfigRequest]:
    """The config resources other than topics that the proxy would judge, in request order."""
    if not isinstance(spec, AlterConfigsSpec | IncrementalAlterConfigsSpec):
        return []
    who = Principal(spec.principal, spec.client_id, spec.client_address)
    return [
        BrokerConfigRequest(
            resource=r.resource,
            name=r.name,
            principal=who,
            changes=_changes(r),
            replace=isinstance(spec, AlterConfigsSpec),
            validate_only=spec.validate_only,
        )
        for r in spec.resources
    ]


def _changes(
    resource: AlterResourceConfigs | IncrementalResourceConfigs,
) -> tuple[ConfigChange, ...]:
    if isinstance(resource, AlterResourceConfigs):
        # The legacy AlterConfigs names the full new set: on the wire every key is a SET.
        return tuple(ConfigChange(k, ConfigOp.SET, v) for k, v in resource.configs.items())
    return tuple(ConfigChange(c.name, c.op, c.value) for c in resource.changes)


def evaluate_resources(
    policy: CompiledPolicy, spec: RequestSpec, cluster: InMemoryCluster
) -> list[BrokerConfigDecision]:
    """Judge a described request's non-topic config resources as the proxy judges them."""
    return judge_broker_configs(policy, build_resource_requests(spec), ClusterFacts(cluster))


def resource_key(request: BrokerConfigRequest) -> str:
    """How `eval` and test cases name a non-topic resource: "cluster default", "broker 1"."""
    # With a space, which no Kafka topic name has: a case's `expect` key cannot mean both.
    if request.resource is ConfigResource.CLUSTER_DEFAULT:
        return "cluster default"
    return f"{request.resource.value.replace('_', ' ')} {request.name}"
