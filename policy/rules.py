"""The policy file's schema: rules, selectors, constraints and plugins, validated by pydantic."""

from __future__ import annotations

import re
from datetime import datetime
from fnmatch import fnmatchcase
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)

from kafka_policy_proxy.codec.api_classes import ADMIN_API_NAMES
from kafka_policy_proxy.policy.configs import ConfigType, parse_bound
from kafka_policy_proxy.policy.model import Fact, Mode

RULE_NAME = r"^[a-z0-9][a-z0-9._-]*$"
ActionName = Literal[
    "create",
    "alter",
    "alter:configs",
    "alter:partitions",
    "alter:reassignment",
    "delete",
    "delete_records",
]
Bound = int | float | str
PositiveInt = Annotated[int, Field(ge=1)]


def _check_regex(value: str | None) -> str | None:
    if value is not None:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from exc
    return value


def _check_min_max(value: Any, info: ValidationInfo) -> Any:
    low = info.data.get("min")
    numbers = isinstance(low, int | float) and isinstance(value, int | float)
    if value is not None and numbers and low > value:
        raise ValueError(f"max ({value}) is less than min ({low})")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Selector(_Strict):
    """Which requests a rule applies to; every given field must match (AND)."""

    topic: str | None = Field(
        default=None, description="regex matched against the whole, exact topic name"
    )
    topic_prefix: str | None = Field(default=None, description="the topic name starts with this")
    principals: list[str] | None = Field(
        default=None, description="principals, exact or glob (`User:svc-*`); any if absent"
    )
    except_principals: list[str] = Field(
        default_factory=list, description="principals (exact or glob) the rule never applies to"
    )
    client_ids: list[str] | None = Field(
        default=None, description="client ids, exact or glob; any if absent"
    )
    actions: list[ActionName] | None = Field(
        default=None, description="actions; `alter` covers all three alter kinds; any if absent"
    )
    internal: bool = Field(
        default=False, description="also apply to internal topics such as __consumer_offsets"
    )

    _regex = field_validator("topic")(_check_regex)


class PartitionsConstraint(_Strict):
    """Partition count bounds on create and on partition increases."""

    min: PositiveInt | None = None
    max: PositiveInt | None = None
    max_increase: Annotated[int, Field(ge=0)] | None = Field(
        default=None, description="largest number of partitions one alter may add"
    )
    cap: bool = Field(
        default=False,
        description="a create beyond min/max gets the bound instead of a denial "
        "(not with an explicit assignment)",
    )

    _max = field_validator("max")(_check_min_max)


class ReplicationConstraint(_Strict):
    """Replication factor bounds on create and reassignment; explicit assignments."""

    min: PositiveInt | None = None
    max: PositiveInt | None = None
    explicit_assignment: bool = Field(
        default=True,
        description="false denies create/partition-increase requests that place replicas",
    )

    _max = field_validator("max")(_check_min_max)


class ConfigConstraint(_Strict):
    """Constraints on one topic config key."""

    type: ConfigType | None = Field(
        default=None, description="how to read the value; known Kafka configs have a default"
    )
    min: Bound | None = Field(default=None, description="number, duration ('7d') or size ('1GiB')")
    max: Bound | None = None
    values: list[str] | None = Field(
        default=None, description="allowed values (for list configs: allowed items)"
    )
    pattern: str | None = Field(default=None, description="regex the whole value must match")
    required: bool = Field(
        default=False, description="must be set on create; may not be reset to the default"
    )
    forbidden: bool = Field(default=False, description="may not be set by the request")
    immutable: bool = Field(default=False, description="may not change after the topic exists")
    default: str | int | None = Field(
        default=None, description="set on a create that leaves the config out (override)"
    )
    force: str | int | None = Field(
        default=None,
        description="set on every create, and on every change that names the config (override)",
    )
    cap: bool = Field(
        default=False,
        description="a value beyond min/max is set to the bound instead of denied (override)",
    )

    _regex = field_validator("pattern")(_check_regex)

    @field_validator("default", "force", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("must be a string or a number, as the config's value is sent")
        return value

    @field_validator("min", "max", mode="before")
    @classmethod
    def _bound(cls, value: Any) -> Any:
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float | str)
        ):
            raise ValueError("must be a number, a duration such as '7d' or a size such as '1GiB'")
        return value


class ClusterLimits(_Strict):
    """Cluster-wide budgets, read from the ClusterState."""

    max_total_partitions: PositiveInt | None = None
    max_partitions_per_broker: PositiveInt | None = None
    max_topics: PositiveInt | None = None


class StreamsSpec(_Strict):
    """Kafka Streams internal-topic protection (KIP-698)."""

    application_ids: list[str] | None = Field(
        default=None, description="application ids (exact or glob); any if absent"
    )
    owners: dict[str, list[str]] = Field(
        default_factory=dict,
        description="application id (or glob) -> principals allowed to delete its topics",
    )


IN_USE_ACTIONS = frozenset({"delete", "delete_records"})
# Consumer groups the in-use check examines unless a rule says otherwise.
DEFAULT_MAX_GROUPS = 1000


class InUseConstraint(_Strict):
    """The in-use guard on deletes and DeleteRecords (docs/policy.md, "In-use guards").

    A topic is in use when a partition's latest record is younger than `written_within`, or
    a consumer group uses it: members assigned or subscribed to it, or offsets committed on
    it within `consumed_within` (any commit, whatever its age, when that is left out).
    """

    written_within: Bound | None = Field(
        default=None,
        description="deny a delete while a partition's latest record is this recent ('15m'); "
        "writes are not checked if absent",
    )
    consumed_within: Bound | None = Field(
        default=None,
        description="a group that consumed this recently ('15m') is active; every group with "
        "committed offsets is, if absent",
    )
    max_groups: PositiveInt = Field(
        default=DEFAULT_MAX_GROUPS,
        description="deny when the cluster has more consumer groups than this to examine",
    )

    @field_validator("written_within", "consumed_within", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        if value is None:
            return value
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ValueError("must be a duration such as '15m', or milliseconds")
        if parse_bound(value, ConfigType.DURATION) < 0:
            raise ValueError("must not be negative")
        return value

    def window_ms(self, key: Literal["written_within", "consumed_within"]) -> int | None:
        """The window in milliseconds, or None where it is not set."""
        value = getattr(self, key)
        return None if value is None else int(parse_bound(value, ConfigType.DURATION))


JavaInterface = Literal["create", "alter_config"]
JavaConfigValue = str | int | float | bool


class JavaPolicySpec(_Strict):
    """A broker policy class (CreateTopicPolicy, AlterConfigPolicy) run by the proxy's JVM."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    jar: str = Field(
        description="the policy's jar; a relative path is read from the policy's folder"
    )
    class_: str = Field(alias="class", pattern=r"^[A-Za-z_$][\w$]*(\.[A-Za-z_$][\w$]*)*$")
    classpath: list[str] = Field(
        default_factory=list,
        description="more jars, such as the broker's kafka-clients jar; `*` globs allowed",
    )
    config: dict[str, JavaConfigValue] = Field(
        default_factory=dict,
        description="what configure() receives, as the broker passes its server.properties",
    )
    applies_to: list[JavaInterface] = Field(
        default_factory=lambda: list[JavaInterface](("create", "alter_config")),
        min_length=1,
        description="create: called as a CreateTopicPolicy; alter_config: as an AlterConfigPolicy",
    )


class Rule(_Strict):
    """A named rule: a selector and constraints, the Streams rule kind, or a Java policy."""

    name: str = Field(pattern=RULE_NAME)
    description: str = ""
    mode: Mode = Mode.ENFORCE
    match: Selector = Field(default_factory=Selector)
    name_pattern: str | None = Field(
        default=None, description="regex a new topic's whole name must match"
    )
    partitions: PartitionsConstraint | None = None
    replication: ReplicationConstraint | None = None
    configs: dict[str, ConfigConstraint] = Field(default_factory=dict)
    deny: bool = Field(default=False, description="deny every request the selector matches")
    message: str | None = Field(default=None, description="added to this rule's messages")
    cluster: ClusterLimits | None = None
    name_collision: bool = Field(
        default=False, description="deny a new name that equals an existing one up to '.'/'_'"
    )
    streams: StreamsSpec | None = None
    java_policy: JavaPolicySpec | None = None
    in_use: InUseConstraint | None = Field(
        default=None,
        description="deny deleting a topic, or its records, that is still written or read",
    )

    _regex = field_validator("name_pattern")(_check_regex)

    @field_validator("in_use")
    @classmethod
    def _deletes_only(
        cls, value: InUseConstraint | None, info: ValidationInfo
    ) -> InUseConstraint | None:
        match = info.data.get("match")
        actions = set(match.actions or ()) if isinstance(match, Selector) else set()
        others = sorted(actions - IN_USE_ACTIONS)
        if value is not None and others:
            raise ValueError(
                f"applies to delete and delete_records only; match.actions also names "
                f"{', '.join(others)}"
            )
        return value


class PluginSpec(_Strict):
    """A Python plugin, loaded by dotted path, with its own config."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    name: str = Field(pattern=RULE_NAME)
    class_: str = Field(
        alias="class", description="`package.module.Class` or `package.module:Class`"
    )
    config: dict[str, Any] = Field(default_factory=dict)
    mode: Mode = Mode.ENFORCE
    match: Selector = Field(default_factory=Selector)
    needs: list[Fact] | None = Field(
        default=None, description="cluster facts the plugin reads; all of them if absent"
    )


class AdminApiRule(_Strict):
    """Which principals may call which cluster or security mutation APIs (the rest are denied)."""

    name: str = Field(pattern=RULE_NAME)
    description: str = ""
    principals: list[str] = Field(
        min_length=1, description="principals, exact or glob (`User:platform-*`)"
    )
    apis: list[str] = Field(
        min_length=1, description="API names as Kafka spells them (`CreateAcls`), or `*` for all"
    )

    @field_validator("apis")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - ADMIN_API_NAMES - {"*"})
        if unknown:
            raise ValueError(
                f"not a cluster or security mutation API: {', '.join(unknown)} "
                "(docs/security.md lists them)"
            )
        return value


ConfigResourceName = Literal[
    "cluster_default", "broker", "broker_logger", "group", "client_metrics"
]


class BrokerConfigRule(_Strict):
    """Which principals may change which keys of brokers, the cluster default, loggers, groups
    or client-metrics subscriptions, within which bounds (the rest are denied)."""

    name: str = Field(pattern=RULE_NAME)
    description: str = ""
    principals: list[str] = Field(
        min_length=1, description="principals, exact or glob (`User:platform-*`)"
    )
    resources: list[ConfigResourceName] = Field(
        min_length=1,
        description="cluster_default (every broker's default), broker (one broker id), "
        "broker_logger, group, client_metrics",
    )
    keys: list[str] = Field(
        min_length=1, description="config keys, exact or glob (`log.cleaner.*`), `*` for all"
    )
    configs: dict[str, ConfigConstraint] = Field(
        default_factory=dict,
        description="bounds per key: type, min, max, values, pattern (each key must be in `keys`)",
    )

    @field_validator("configs")
    @classmethod
    def _bounds_only(
        cls, value: dict[str, ConfigConstraint], info: ValidationInfo
    ) -> dict[str, ConfigConstraint]:
        for key, constraint in value.items():
            topic_only = [
                flag for flag in ("required", "forbidden", "immutable") if getattr(constraint, flag)
            ]
            if topic_only:
                raise ValueError(
                    f"{key}: {', '.join(topic_only)} apply to topic configs only; "
                    "leave the key out of `keys` to deny it"
                )
            if not any(fnmatchcase(key, pattern) for pattern in info.data.get("keys") or ()):
                raise ValueError(f"{key} is bounded here but not granted by `keys`")
        return value


USER_PLACEHOLDER = "{user}"


class Budget(_Strict):
    """A budget per principal or topic scope: topics, partitions (or replicas), retention bytes."""

    name: str = Field(
        pattern=RULE_NAME, description="the rule id in violations, metrics and reports"
    )
    description: str = ""
    mode: Mode = Mode.ENFORCE
    principals: list[str] | None = Field(
        default=None,
        min_length=1,
        description="principals (exact or glob) whose requests it judges; any if absent",
    )
    topic_prefix: str | None = Field(
        default=None,
        min_length=1,
        description="the topics it counts start with this; `{user}` stands for the "
        "principal's name after `User:` (a budget per principal)",
    )
    topic: str | None = Field(
        default=None, description="regex the whole name of the topics it counts must match"
    )
    max_topics: PositiveInt | None = None
    max_partitions: PositiveInt | None = None
    count_replicas: bool = Field(
        default=False,
        description="max_partitions counts replicas (partitions x replication factor)",
    )
    max_retention_bytes: int | str | None = Field(
        default=None,
        description="the sum over its topics of partitions x retention.bytes ('2TiB' allowed)",
    )

    _regex = field_validator("topic")(_check_regex)

    @field_validator("max_retention_bytes", mode="before")
    @classmethod
    def _size(cls, value: Any) -> Any:
        if value is None:
            return value
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise ValueError("must be a number of bytes or a size such as '2TiB'")
        size = parse_bound(value, ConfigType.SIZE)
        if size < 1:
            raise ValueError("must be at least 1 byte")
        return int(size)

    @field_validator("topic")
    @classmethod
    def _no_placeholder(cls, value: str | None) -> str | None:
        if value is not None and USER_PLACEHOLDER in value:
            raise ValueError("`{user}` is a placeholder of topic_prefix only")
        return value

    @model_validator(mode="after")
    def _keyed(self) -> Budget:
        if self.principals is None and self.topic_prefix is None and self.topic is None:
            raise ValueError("a budget needs a key: principals, topic_prefix or topic")
        if (
            self.max_topics is None
            and self.max_partitions is None
            and (self.max_retention_bytes is None)
        ):
            raise ValueError(
                "a budget needs a limit: max_topics, max_partitions or max_retention_bytes"
            )
        if self.count_replicas and self.max_partitions is None:
            raise ValueError("count_replicas applies to max_partitions, which is not set")
        if self.principals is not None and self.topic_prefix is None and self.topic is None:
            raise ValueError(
                "principals without topic_prefix or topic: the cluster cannot tell which "
                "topics a principal owns; give a topic scope, or a per-principal one with "
                '`topic_prefix: "{user}."`'
            )
        return self


# RFC 3339 with an offset or Z: a time without one means a different instant on every host.
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})")


class PolicyException(_Strict):
    """Waives named rules for the requests a selector matches, until an instant."""

    name: str = Field(pattern=RULE_NAME)
    match: Selector = Field(description="which requests it covers; every given field must match")
    waive: list[str] = Field(
        min_length=1, description="the rule and plugin names it waives (each must exist)"
    )
    reason: str = Field(min_length=1, description="why: shown in `policy check` and reviews")
    ticket: str | None = Field(default=None, description="where it was agreed (recorded)")
    expires: AwareDatetime = Field(
        description="RFC 3339 with an offset or Z; it waives while now < expires"
    )

    @field_validator("reason")
    @classmethod
    def _reason(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must say why the exception exists")
        return value

    @field_validator("expires", mode="before")
    @classmethod
    def _rfc3339(cls, value: Any) -> Any:
        # YAML reads an unquoted timestamp as a datetime; pydantic would read a number as epoch.
        if isinstance(value, datetime):
            if value.tzinfo is None:
                raise ValueError("needs an offset or Z (RFC 3339): a naive time is refused")
            return value
        if not isinstance(value, str) or _RFC3339.fullmatch(value.strip()) is None:
            raise ValueError(
                "must be an RFC 3339 time with an offset or Z, such as 2027-01-31T18:00:00Z"
            )
        return value.strip()


class ExceptionPolicy(_Strict):
    """Limits on the policy's exceptions."""

    max_days: PositiveInt = Field(
        description="refuse an exception expiring more than this many days after the policy "
        "is loaded or checked"
    )


TeamName = Annotated[str, StringConstraints(pattern=RULE_NAME)]
Regex = Annotated[str, AfterValidator(_check_regex)]


class OwnerSpec(_Strict):
    """The topics one team owns, for the scan's reports per team (`policy.owners`)."""

    topic_prefixes: list[str] = Field(
        default_factory=list, description="the team owns topics whose names start with one of these"
    )
    topics: list[Regex] = Field(
        default_factory=list,
        description="regexes matched against the whole, exact topic name",
    )

    @model_validator(mode="after")
    def _owns_something(self) -> OwnerSpec:
        if not self.topic_prefixes and not self.topics:
            raise ValueError("an owner needs `topic_prefixes` or `topics`")
        return self


class PolicyDocument(_Strict):
    """A whole policy file."""

    version: Literal[1] = 1
    dry_run: bool = Field(default=False, description="run every rule in audit mode")
    enforce: Literal["nothing"] | None = Field(
        default=None,
        description="`nothing` declares a policy that denies nothing (no rules, every rule "
        "in audit mode, or dry_run); without it such a policy is refused",
    )
    rules: list[Rule] = Field(default_factory=list)
    plugins: list[PluginSpec] = Field(default_factory=list)
    admin_apis: list[AdminApiRule] = Field(
        default_factory=list,
        description="who may call cluster and security mutation APIs; denied unless listed",
    )
    broker_configs: list[BrokerConfigRule] = Field(
        default_factory=list,
        description="who may change broker, cluster-default, logger, group and client-metrics "
        "configs; denied unless listed",
    )
    budgets: list[Budget] = Field(
        default_factory=list,
        description="limits on the topics, partitions and retention bytes of a principal "
        "or topic scope, judged against the cluster after the request",
    )
    exceptions: list[PolicyException] = Field(
        default_factory=list,
        description="rules waived for selected requests until an expiry instant",
    )
    exception_policy: ExceptionPolicy | None = Field(
        default=None, description="limits on `exceptions` (how far ahead they may expire)"
    )
    owners: dict[TeamName, OwnerSpec] = Field(
        default_factory=dict,
        description="team -> the topics it owns (prefixes, regexes); the first team in file "
        "order that matches a topic owns it. Only reports read it: no decision changes",
    )
