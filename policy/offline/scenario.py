"""Described requests, cluster states and test suites for the offline tools (`policy eval/test`).

A described request mirrors one Kafka admin API call: it is built with the proxy's builders
and judged as one batch by the one judge (`policy.judge`) over the described cluster, so an
offline result is what the proxy would decide with the same cluster facts. The config
resources that are not topics (brokers, the cluster default, loggers, groups, client metrics)
are judged by the judge's `judge_broker_configs`, as the proxy judges them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from policy import builders
from policy.broker_configs import BrokerConfigDecision, BrokerConfigRequest, ConfigResource
from policy.cluster import InMemoryCluster
from policy.engine import CompiledPolicy
from policy.judge import ClusterFacts, Verdict, judge, judge_broker_configs
from policy.loader import PolicyError, Problem, parse_source, validation_problems
from policy.model import (
    ConfigChange,
    ConfigMap,
    ConfigOp,
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
Text = Annotated[str, BeforeValidator(_as_text)]
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


class _ConfigResourceSpec(_Strict):
    """A config resource that is not a topic, named as Kafka names it.

    A broker with no name is the cluster default, as on the wire; `cluster_default` says the
    same and takes no name.
    """

    type: ConfigResource
    name: Text = ""

    @model_validator(mode="after")
    def _default_has_no_name(self) -> _ConfigResourceSpec:
        if self.type is ConfigResource.CLUSTER_DEFAULT and self.name:
            raise ValueError(
                "the cluster default has no name; one broker's configs are type: broker, name: ID"
            )
        return self

    @property
    def resource(self) -> ConfigResource:
        """The policy's resource kind (a broker without a name is the cluster default)."""
        if self.type is ConfigResource.BROKER and not self.name:
            return ConfigResource.CLUSTER_DEFAULT
        return self.type


_Resource = TypeVar("_Resource", bound=_ConfigResourceSpec)


def _once_each(resources: list[_Resource]) -> list[_Resource]:
    # Kafka refuses every copy of a resource named twice; neither copy is judged.
    seen = set()
    for r in resources:
        if (r.resource, r.name) in seen:
            what = (
                "the cluster default"
                if r.resource is ConfigResource.CLUSTER_DEFAULT
                else f"{r.type.value} {r.name!r}"
            )
            raise ValueError(f"{what} is named twice; Kafka refuses that")
        seen.add((r.resource, r.name))
    return resources


class AlterResourceConfigs(_ConfigResourceSpec):
    """One non-topic resource of an AlterConfigs request (full replacement)."""

    configs: Configs = Field(default_factory=dict)


class IncrementalResourceConfigs(_ConfigResourceSpec):
    """One non-topic resource of an IncrementalAlterConfigs request."""

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
    topics: list[AlterTopicConfigs] = Field(default_factory=list)
    resources: Annotated[list[AlterResourceConfigs], AfterValidator(_once_each)] = Field(
        default_factory=list
    )


class IncrementalAlterConfigsSpec(_Request):
    """A described IncrementalAlterConfigs request."""

    operation: Literal["incremental_alter_configs"]
    topics: list[IncrementalTopicConfigs] = Field(default_factory=list)
    resources: Annotated[list[IncrementalResourceConfigs], AfterValidator(_once_each)] = Field(
        default_factory=list
    )


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
    """An existing topic; `configs` are its own settings, laid over the broker defaults.

    `overrides` are the configs set on the topic itself, which a new default does not reach;
    without it every config counts as inherited (as where DescribeConfigs did not say).
    """

    name: str
    topic_id: str | None = None
    partitions: int = 1
    replication_factor: int = 1
    assignment: dict[int, Replicas] | None = None
    configs: Configs = Field(default_factory=dict)
    overrides: list[str] | None = None
    internal: bool = False
    marked_for_deletion: bool = False

    @model_validator(mode="after")
    def _overrides_have_values(self) -> TopicSpec:
        missing = [key for key in self.overrides or () if key not in self.configs]
        if missing:
            raise ValueError(f"overrides without a value in `configs`: {', '.join(missing)}")
        return self


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
                    overrides=None if t.overrides is None else frozenset(t.overrides),
                )
                for t in self.topics
            ),
            self.brokers,
            self.defaults,
        )


class Expectation(_Strict):
    """What a test case expects for one topic or other config resource."""

    allowed: bool | None = None
    violations: list[str] | None = Field(
        default=None, description="the violated rule names, in order (audit ones included)"
    )
    message_contains: str | None = None


class Case(_Strict):
    """One case: a request, an optional cluster, and the expected decision per topic or
    resource (named as `resource_key` names it: "cluster default", "broker 1")."""

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
