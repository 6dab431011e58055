"""Described requests, cluster states and test suites for the offline tools (`policy eval/test`).

A described request mirrors one Kafka admin API call: it is built with the proxy's builders
and judged as one batch by the one judge (`policy.judge`) over the described cluster, so an
offline result is what the proxy would decide with the same cluster facts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter, ValidationError

from policy import builders
from policy.cluster import InMemoryCluster
from policy.engine import CompiledPolicy
from policy.judge import ClusterFacts, Verdict, judge
from policy.loader import PolicyError, Problem, parse_source, validation_problems
from policy.model import (
    ConfigMap,
    ConfigOp,
    Decision,
    Principal,
    TopicRequest,
    TopicState,
    freeze_assignment,
)


def _as_text(value: Any) -> Any:
    # YAML turns `retention.ms: 86400000` into an int; Kafka configs are strings.
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return value


ConfigValue = Annotated[str | None, BeforeValidator(_as_text)]
Configs = dict[str, ConfigValue]
Replicas = list[int]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CreateTopic(_Strict):
    """One topic of a CreateTopics request."""

    name: str
    partitions: int = -1
    replication_factor: int = -1
    assignment: dict[int, Replicas] | None = None
    configs: Configs = Field(default_factory=dict)


class AutoCreateTopic(_Strict):
    """A topic a Metadata request would auto-create."""

    name: str


class AlterTopicConfigs(_Strict):
    """One topic of an AlterConfigs request (full replacement)."""

    name: str
    configs: Configs = Field(default_factory=dict)


class ConfigChangeSpec(_Strict):
    """One IncrementalAlterConfigs entry."""

    name: str
    op: ConfigOp = ConfigOp.SET
    value: ConfigValue = None


class IncrementalTopicConfigs(_Strict):
    """One topic of an IncrementalAlterConfigs request."""

    name: str
    changes: list[ConfigChangeSpec]


class CreatePartitionsTopic(_Strict):
    """One topic of a CreatePartitions request."""

    name: str
    count: int
    assignment: list[Replicas] | None = None


class ReassignTopic(_Strict):
    """One topic of an AlterPartitionReassignments request (null replicas cancel)."""

    name: str
    partitions: dict[int, Replicas | None]


class DeleteTopic(_Strict):
    """One topic of a DeleteTopics request, by name or topic id."""

    name: str | None = None
    topic_id: str | None = None


class DeleteRecordsTopic(_Strict):
    """One topic of a DeleteRecords request: partition -> offset (-1 = high watermark)."""

    name: str
    offsets: dict[int, int]


class _Request(_Strict):
    principal: str = "User:ANONYMOUS"
    client_id: str = ""
    client_address: str = ""
    validate_only: bool = False


class CreateTopicsSpec(_Request):
    """A described CreateTopics request."""

    operation: Literal["create_topics"]
    topics: list[CreateTopic]


class AutoCreateSpec(_Request):
    """A described Metadata request that would auto-create topics."""

    operation: Literal["auto_create"]
    topics: list[AutoCreateTopic]


class AlterConfigsSpec(_Request):
    """A described AlterConfigs request."""

    operation: Literal["alter_configs"]
    topics: list[AlterTopicConfigs]


class IncrementalAlterConfigsSpec(_Request):
    """A described IncrementalAlterConfigs request."""

    operation: Literal["incremental_alter_configs"]
    topics: list[IncrementalTopicConfigs]


class CreatePartitionsSpec(_Request):
    """A described CreatePartitions request."""

    operation: Literal["create_partitions"]
    topics: list[CreatePartitionsTopic]


class ReassignSpec(_Request):
    """A described AlterPartitionReassignments request."""

    operation: Literal["alter_partition_reassignments"]
    topics: list[ReassignTopic]


class DeleteTopicsSpec(_Request):
    """A described DeleteTopics request."""

    operation: Literal["delete_topics"]
    topics: list[DeleteTopic]


class DeleteRecordsSpec(_Request):
    """A described DeleteRecords request."""

    operation: Literal["delete_records"]
    topics: list[DeleteRecordsTopic]


RequestSpec = Annotated[
    CreateTopicsSpec
    | AutoCreateSpec
    | AlterConfigsSpec
    | IncrementalAlterConfigsSpec
    | CreatePartitionsSpec
    | ReassignSpec
    | DeleteTopicsSpec
    | DeleteRecordsSpec,
    Field(discriminator="operation"),
]


class TopicSpec(_Strict):
    """An existing topic; `configs` are its own settings, laid over the broker defaults."""

    name: str
    topic_id: str | None = None
    partitions: int = 1
    replication_factor: int = 1
    assignment: dict[int, Replicas] | None = None
    configs: Configs = Field(default_factory=dict)
    internal: bool = False
    marked_for_deletion: bool = False


class ClusterSpec(_Strict):
    """A described cluster: broker count, default topic configs and existing topics."""

    brokers: int = Field(default=3, ge=1)
    defaults: Configs = Field(default_factory=dict)
    topics: list[TopicSpec] = Field(default_factory=list)

    def build(self) -> InMemoryCluster:
        """The in-memory ClusterState this describes."""
        defaults = {
            k: v for k, v in self.defaults.items() if k not in builders.BROKER_ONLY_DEFAULTS
        }
        return InMemoryCluster.of(
            (
                TopicState(
                    name=t.name,
                    topic_id=t.topic_id,
                    partitions=t.partitions,
                    replication_factor=t.replication_factor,
                    assignment=freeze_assignment((t.assignment or {}).items()),
                    configs=ConfigMap({**defaults, **t.configs}),
                    internal=t.internal,
                    marked_for_deletion=t.marked_for_deletion,
                )
                for t in self.topics
            ),
            self.brokers,
            self.defaults,
        )


class Expectation(_Strict):
    """What a test case expects for one topic."""

    allowed: bool | None = None
    violations: list[str] | None = Field(
        default=None, description="the violated rule names, in order (audit ones included)"
    )
    message_contains: str | None = None


class Case(_Strict):
    """One case: a request, an optional cluster, and the expected decision per topic."""

    name: str
    request: RequestSpec
    cluster: ClusterSpec | None = None
    expect: dict[str, Expectation]


class Suite(_Strict):
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
    policy: CompiledPolicy, spec: RequestSpec, cluster: InMemoryCluster
) -> list[Verdict]:
    """Judge a described request as the proxy judges one wire request: as one batch."""
    return judge(policy, build_requests(spec, cluster), ClusterFacts(cluster))


@dataclass(frozen=True, slots=True)
class CaseResult:
    """A test case's outcome: the failures (empty when it passed) and the decisions."""

    name: str
    failures: tuple[str, ...]
    decisions: tuple[Decision, ...]

    @property
    def passed(self) -> bool:
        """Whether every expectation held."""
        return not self.failures


def run_suite(policy: CompiledPolicy, suite: Suite) -> list[CaseResult]:
    """Run every case of a suite against a policy."""
    results = []
    for case in suite.cases:
        cluster = (case.cluster or suite.cluster).build()
        verdicts = evaluate_spec(policy, case.request, cluster)
        decisions = [v.decision for v in verdicts if v.decision is not None]
        by_topic = {d.topic: d for d in decisions}
        failures = []
        for topic, expected in case.expect.items():
            decision = by_topic.get(topic)
            if decision is None:
                failures.append(f"{topic}: no decision (the request does not name this topic)")
                continue
            failures += _compare(topic, expected, decision)
        results.append(CaseResult(case.name, tuple(failures), tuple(decisions)))
    return results


def _compare(topic: str, expected: Expectation, decision: Decision) -> list[str]:
    failures = []
    if expected.allowed is not None and expected.allowed != decision.allowed:
        verdict = "allowed" if decision.allowed else "denied"
        failures.append(
            f"{topic}: expected {'allowed' if expected.allowed else 'denied'}, got {verdict}"
        )
    rules = [v.rule for v in decision.violations]
    if expected.violations is not None and expected.violations != rules:
        failures.append(f"{topic}: expected violations {expected.violations}, got {rules}")
    if expected.message_contains is not None and not any(
        expected.message_contains in v.message for v in decision.violations
    ):
        failures.append(f"{topic}: no message contains {expected.message_contains!r}")
    return failures
