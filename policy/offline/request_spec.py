"""Described requests: one Kafka admin API call each, as `policy eval` and `policy test` read
them from YAML; kept strict, so a misspelt key is an error and not a request of defaults."""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    model_validator,
)

from kafka_policy_proxy.policy.broker_configs import ConfigResource
from kafka_policy_proxy.policy.model import ConfigOp


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


class Strict(BaseModel):
    """A described thing: unknown keys are errors, and nothing changes once read."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class CreateTopic(Strict):
    """One topic of a CreateTopics request."""

    name: str
    partitions: int = -1
    replication_factor: int = -1
    assignment: dict[int, Replicas] | None = None
    configs: Configs = Field(default_factory=dict)


class AutoCreateTopic(Strict):
    """A topic a Metadata request would auto-create."""

    name: str


class AlterTopicConfigs(Strict):
    """One topic of an AlterConfigs request (full replacement)."""

    name: str
    configs: Configs = Field(default_factory=dict)


class ConfigChangeSpec(Strict):
    """One IncrementalAlterConfigs entry."""

    name: str
    op: ConfigOp = ConfigOp.SET
    value: ConfigValue = None


class IncrementalTopicConfigs(Strict):
    """One topic of an IncrementalAlterConfigs request."""

    name: str
    changes: list[ConfigChangeSpec]


class _ConfigResourceSpec(Strict):
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


class CreatePartitionsTopic(Strict):
    """One topic of a CreatePartitions request."""

    name: str
    count: int
    assignment: list[Replicas] | None = None


class ReassignTopic(Strict):
    """One topic of an AlterPartitionReassignments request (null replicas cancel)."""

    name: str
    partitions: dict[int, Replicas | None]


class DeleteTopic(Strict):
    """One topic of a DeleteTopics request, by name or topic id."""

    name: str | None = None
    topic_id: str | None = None


class DeleteRecordsTopic(Strict):
    """One topic of a DeleteRecords request: partition -> offset (-1 = high watermark)."""

    name: str
    offsets: dict[int, int]


class _Request(Strict):
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
