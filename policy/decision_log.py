"""The decision record: one audit event per decision, its schema owned here and only here.

A decision is about one resource: a topic (judged by the topic policy) or, for a cluster or
security mutation API, the API itself (`resource_type: api`, `topic: null`).

The same record goes to the audit file, stdout and the Parquet lake (docs/audit-log.md). The
pipeline derives its Spark schema from `json_schema()`; nothing else types these fields again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, model_validator

from kafka_policy_proxy.policy.admin_apis import AdminDecision
from kafka_policy_proxy.policy.broker_configs import BrokerConfigDecision, ConfigResource
from kafka_policy_proxy.policy.model import (
    Action,
    Decision,
    Mode,
    OverrideKind,
    TopicRequest,
    Violation,
)

SCHEMA_VERSION = 2
# A request's topic decisions summarised in one record: the only records of schema 3, so a
# reader of schema 2 counts them as an unknown version rather than misread them.
SUMMARY_SCHEMA_VERSION = 3
# Versions the readers still accept: v1 events lack the four trace fields.
READABLE_VERSIONS = (1, 2, 3)
TRACE_FIELDS = ("decision_id", "policy_revision", "cluster_id", "proxy_id")
# Also in every v2 record and absent in v1, whose records are all about a topic.
RESOURCE_FIELDS = ("resource_type", "resource")
V2_FIELDS = TRACE_FIELDS + RESOURCE_FIELDS
EVENT_KIND = "decision"
JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


class Outcome(StrEnum):
    """The record's `decision` field."""

    ALLOWED = "allowed"
    DENIED = "denied"
    AUDIT_WOULD_DENY = "audit-would-deny"
    # Not a policy decision: the topic does not exist, answered as the broker would.
    UNKNOWN_TOPIC = "unknown-topic"


class ResourceType(StrEnum):
    """What a decision is about; `cluster` is the cluster-wide broker config default."""

    TOPIC = "topic"
    BROKER = "broker"
    BROKER_LOGGER = "broker_logger"
    CLUSTER = "cluster"
    GROUP = "group"
    CLIENT_METRICS = "client_metrics"
    USER = "user"
    ACL = "acl"
    API = "api"
    TOPICS = "topics"  # a summary record: many topics of one request (schema 3)


class RecordedAction(StrEnum):
    """The record's `action`: a topic action, or a call of a cluster or security mutation API."""

    CREATE = Action.CREATE.value
    ALTER = Action.ALTER.value
    DELETE = Action.DELETE.value
    DELETE_RECORDS = Action.DELETE_RECORDS.value
    ADMIN_API = "admin_api"
    ALTER_BROKER_CONFIG = "alter_broker_config"


# The resource types of `alter_broker_config` records, by the policy's resource kind.
CONFIG_RESOURCE_TYPES = {
    ConfigResource.CLUSTER_DEFAULT: ResourceType.CLUSTER,
    ConfigResource.BROKER: ResourceType.BROKER,
    ConfigResource.BROKER_LOGGER: ResourceType.BROKER_LOGGER,
    ConfigResource.GROUP: ResourceType.GROUP,
    ConfigResource.CLIENT_METRICS: ResourceType.CLIENT_METRICS,
}
NOT_TOPIC_ACTIONS = frozenset({RecordedAction.ADMIN_API, RecordedAction.ALTER_BROKER_CONFIG})
# The resource types whose records take a topic action: one topic, or a summary of many.
TOPIC_ACTION_RESOURCES = frozenset({ResourceType.TOPIC, ResourceType.TOPICS})


# What went through the proxy: an audit-mode violation does not stop a request.
PASSED = frozenset({Outcome.ALLOWED, Outcome.AUDIT_WOULD_DENY})


# The one reason of a non-create on a topic the facts show missing (UNKNOWN_TOPIC_OR_PARTITION).
UNKNOWN_TOPIC_RULE = "unknown-topic"


def is_unknown_topic(decision: Decision | AdminDecision | BrokerConfigDecision) -> bool:
    """Whether the topic was found missing (the judge's one reason), not judged by a rule."""
    return [v.rule for v in decision.violations] == [UNKNOWN_TOPIC_RULE]


def outcome(decision: Decision | AdminDecision | BrokerConfigDecision) -> Outcome:
    """allowed, denied, audit-would-deny (allowed, with audit-mode violations), or
    unknown-topic (a missing topic, answered as the broker would)."""
    if not decision.allowed:
        return Outcome.UNKNOWN_TOPIC if is_unknown_topic(decision) else Outcome.DENIED
    return Outcome.AUDIT_WOULD_DENY if decision.violations else Outcome.ALLOWED


@dataclass(frozen=True, slots=True)
class Stamp:
    """Where and when a decision was made: the fields a record carries beside the decision."""

    time: str  # RFC 3339 UTC, microseconds
    decision_id: str
    policy_revision: str
    cluster_id: str | None
    proxy_id: str
    conn: int
    client: str
    api: str
    api_key: int
    api_version: int


def _record(
    stamp: Stamp,
    *,
    principal: str,
    client_id: str,
    action: RecordedAction | Action,
    resource_type: ResourceType,
    resource: str,
    topic: str | None,
    validate_only: bool,
    decision: Outcome,
    mode: Mode,
    violations: list[dict[str, Any]],
    request: dict[str, Any],
    schema: int = SCHEMA_VERSION,
) -> dict[str, Any]:
    """A complete record, its keys in the schema's order."""
    return {
        "time": stamp.time,
        "schema": schema,
        "event": EVENT_KIND,
        "decision_id": stamp.decision_id,
        "policy_revision": stamp.policy_revision,
        "cluster_id": stamp.cluster_id,
        "proxy_id": stamp.proxy_id,
        "conn": stamp.conn,
        "client": stamp.client,
        "principal": principal,
        "client_id": client_id,
        "api": stamp.api,
        "api_key": stamp.api_key,
        "api_version": stamp.api_version,
        "action": action.value,
        "resource_type": resource_type.value,
        "resource": resource,
        "topic": topic,
        "validate_only": validate_only,
        "decision": decision.value,
        "mode": mode.value,
        "violations": violations,
        "request": request,
    }


def decision_record(
    request: TopicRequest,
    decision: Decision,
    stamp: Stamp,
    rewritten: TopicRequest | None = None,
) -> dict[str, Any]:
    """One topic decision as a complete audit record; `request` is what the client asked for,
    `rewritten` what the policy's overrides made of it (and forwarded), if they changed it."""
    record = _record(
        stamp,
        principal=request.principal.name,
        client_id=request.principal.client_id,
        action=request.action,
        resource_type=ResourceType.TOPIC,
        resource=decision.topic,
        topic=decision.topic,
        validate_only=request.validate_only,
        decision=outcome(decision),
        mode=decision.mode,
        violations=[v.to_dict() for v in decision.violations],
        request=request.to_dict(),
    )
    if decision.overrides:
        record["overrides"] = [o.to_dict() for o in decision.overrides]
        record["rewritten"] = (rewritten or request).to_dict()
    if decision.budgets:
        record["budgets"] = [b.to_dict() for b in decision.budgets]
    if decision.waived:
        record["waived"] = [w.to_dict() for w in decision.waived]
    usage = (rewritten or request).usage
    if usage is not None:
        record["in_use"] = usage.to_dict()
    return record


def admin_record(decision: AdminDecision, stamp: Stamp) -> dict[str, Any]:
    """One admin API decision as a complete audit record: the resource is the API itself."""
    request = decision.request
    return _record(
        stamp,
        principal=request.principal.name,
        client_id=request.principal.client_id,
        action=RecordedAction.ADMIN_API,
        resource_type=ResourceType.API,
        resource=request.api,
        topic=None,
        validate_only=False,
        decision=outcome(decision),
        mode=decision.mode,
        violations=[v.to_dict() for v in decision.violations],
        request=request.to_dict() | {"rule": decision.rule},
    )


def broker_config_record(decision: BrokerConfigDecision, stamp: Stamp) -> dict[str, Any]:
    """One non-topic config resource's decision: the resource is the broker, the cluster
    default (`cluster`, named ""), the logger, the group or the subscription."""
    request = decision.request
    return _record(
        stamp,
        principal=request.principal.name,
        client_id=request.principal.client_id,
        action=RecordedAction.ALTER_BROKER_CONFIG,
        resource_type=CONFIG_RESOURCE_TYPES[request.resource],
        resource=request.name,
        topic=None,
        validate_only=request.validate_only,
        decision=outcome(decision),
        mode=decision.mode,
        violations=[v.to_dict() for v in decision.violations],
        request=request.to_dict()
        | {"rules": list(decision.rules), "outside": list(decision.outside)},
    )


# A summary record's `request` starts with this key: replay tells it apart by it.
SUMMARISED = "summarised"


def summary_record(
    first: TopicRequest,
    stamp: Stamp,
    *,
    decision: Outcome,
    mode: Mode,
    violations: list[dict[str, Any]],
    summary: dict[str, Any],
) -> dict[str, Any]:
    """One request's many topic decisions as one schema-3 record: counts by decision and
    rule, and a bounded sample (`policy.decision_summary` computes them)."""
    return _record(
        stamp,
        principal=first.principal.name,
        client_id=first.principal.client_id,
        action=first.action,
        resource_type=ResourceType.TOPICS,
        resource=stamp.api,
        topic=None,
        validate_only=first.validate_only,
        decision=decision,
        mode=mode,
        violations=violations,
        request={
            SUMMARISED: summary["topics"],
            "api": stamp.api,
            "action": first.action.value,
            "principal": first.principal.to_dict(),
            "validate_only": first.validate_only,
        },
        schema=SUMMARY_SCHEMA_VERSION,
    ) | {"summary": summary}


# A request refused before any judgement: SASL authentication had not completed.
AUTHENTICATION_ORDER_RULE = "authentication-order"
# Such a record's principal: none was established, so it is never `User:ANONYMOUS`.
UNAUTHENTICATED = ""


def refusal_violation(api: str, sasl_state: str) -> Violation:
    """Why a request sent before SASL authentication completed was refused."""
    message = (
        f"[{AUTHENTICATION_ORDER_RULE}] {api} sent before SASL authentication completed "
        f"(the SASL exchange is {sasl_state}); connection closed"
    )
    return Violation(AUTHENTICATION_ORDER_RULE, message)


def refusal_record(
    stamp: Stamp, *, client_id: str, listener: str, sasl_state: str
) -> dict[str, Any]:
    """A request refused before any judgement, its SASL exchange unfinished: no principal."""
    # No policy decides it (a dry run refuses it too): `mode` is enforce. Its body is never
    # decoded, so no topic is named: the resource is the API, as in an admin API record.
    return _record(
        stamp,
        principal=UNAUTHENTICATED,
        client_id=client_id,
        action=RecordedAction.ADMIN_API,
        resource_type=ResourceType.API,
        resource=stamp.api,
        topic=None,
        validate_only=False,
        decision=Outcome.DENIED,
        mode=Mode.ENFORCE,
        violations=[refusal_violation(stamp.api, sasl_state).to_dict()],
        # Its own first key, so that replay never judges it as an admin API call.
        request={
            "refused": AUTHENTICATION_ORDER_RULE,
            "api": stamp.api,
            "listener": listener,
            "sasl_state": sasl_state,
        },
    )


# A string in every v2 record, absent in v1: the model holds None for absent.
_TraceText = Annotated[str | None, WithJsonSchema({"type": "string"})]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RecordedViolation(_Strict):
    """One violated rule, as a record lists it."""

    rule: str
    message: str = Field(description="names the rule and the value: `[rule] ...`")
    mode: Mode


class RecordedOverride(_Strict):
    """One change an override action made to the request."""

    rule: str
    kind: OverrideKind
    target: str = Field(description="`partitions` or a config name")
    before: str | None = Field(description="as the client sent it; null where it left it out")
    after: str


class RecordedBudget(_Strict):
    """One budget a topic was judged against (policy/budgets.py)."""

    name: str = Field(description="the budget's name, its rule id")
    usage: int | None = Field(
        ge=0,
        description="what its topics used before the request (with what the batch's earlier "
        "allowed topics add); null: unlimited (a counted topic has retention.bytes -1)",
    )
    added: int | None = Field(
        description="what the request adds (negative: frees); null: unlimited either way"
    )
    limit: int = Field(ge=1)
    unit: Literal["topics", "partitions", "replicas", "retention_bytes"] = Field(
        description="replicas: partitions x replication factor; retention_bytes: partitions x "
        "retention.bytes"
    )


class RecordedWaiver(_Strict):
    """One enforced violation an exception in force waived."""

    rule: str
    exception: str = Field(description="the policy's exception that waived it")
    ticket: str | None = Field(description="the exception's ticket; null if it names none")
    expires: datetime = Field(
        description="the exception's expiry instant, UTC, RFC 3339 with microseconds as `time`"
    )
    message: str = Field(description="the violation's message, as it would have denied")


class SummaryCount(_Strict):
    """Topics of a summarised request by decision (`rule` null) or by decision and rule."""

    decision: Outcome
    rule: str | None = Field(description="null: every topic of this decision")
    rule_mode: Mode | None = Field(description="the rule's mode; null with `rule` null")
    topics: int = Field(ge=1)


class SampledDecision(_Strict):
    """One topic's decision, kept as a sample in a summary record."""

    topic: str
    decision: Outcome
    rules: list[str] = Field(description="the distinct rules it violated, in rule order")


class RecordedSummary(_Strict):
    """What a summary record (schema 3, `resource_type: topics`) keeps of a request's topics."""

    topics: int = Field(ge=1, description="the topic decisions summarised")
    counts: list[SummaryCount] = Field(
        description="per decision (rule null), and per decision and violated rule"
    )
    sample: list[SampledDecision] = Field(
        description="the first topics, and the first topic of every rule not among them"
    )
    unsampled: int = Field(ge=0, description="topics recorded only in the counts")


class RecordedGroupUsage(_Strict):
    """One consumer group as the in-use check saw it on the topic."""

    group: str
    state: str = Field(description="as its coordinator reports it (Stable, Empty, ...)")
    members: bool = Field(description="a member is assigned or subscribed to the topic")
    committed: dict[str, int] = Field(description="partition -> committed offset")
    consumed_at: dict[str, datetime] = Field(
        description="partition -> timestamp of the last record the group had consumed (the "
        "batch holding committed offset - 1): a lower bound on the commit's time; a partition "
        "left out could not be dated"
    )


class RecordedUsage(_Strict):
    """The in-use facts a delete or DeleteRecords was judged on (an `in_use` rule)."""

    topic: str
    read_at: datetime = Field(description="when they were read: every window ends here")
    latest: dict[str, datetime] = Field(
        description="partition -> latest record timestamp (ListOffsets MAX_TIMESTAMP)"
    )
    ends: dict[str, int] = Field(description="partition -> high watermark")
    groups: list[RecordedGroupUsage] = Field(
        description="groups with members on the topic or offsets committed on it"
    )
    groups_listed: int = Field(
        ge=0, description="consumer groups in the cluster; none examined when over the bound"
    )


class DecisionRecord(_Strict):
    """The audit event: the schema of `decision_record()` output, and its validator."""

    model_config = ConfigDict(title="kafka-policy-proxy decision record")

    time: datetime = Field(description="UTC, RFC 3339 with microseconds")
    schema_: Literal[1, 2, 3] = Field(alias="schema", description="this record's schema version")
    event: Literal["decision"]
    # Absent in v1 records (None here), always there in v2: strings, cluster_id may be null.
    decision_id: _TraceText = Field(
        None,
        description="unique per decision, a UUIDv7 in canonical text that sorts by time "
        "(v2; absent in v1; older v2 records have 32 hex digits)",
    )
    policy_revision: _TraceText = Field(
        None, description="content hash of the policy in force, `sha256:...` (v2; absent in v1)"
    )
    cluster_id: str | None = Field(
        None, description="the cluster id from Metadata, null if unknown (v2; absent in v1)"
    )
    proxy_id: _TraceText = Field(
        None, description="the proxy instance that decided (v2; absent in v1)"
    )
    conn: int = Field(description="the proxy's id for the client connection")
    client: str = Field(description="the client's host:port")
    principal: str = Field(
        description="`User:<name>`; empty for a request refused before SASL authentication "
        "completed (no principal was established)"
    )
    client_id: str
    api: str = Field(description="the Kafka API name: CreateTopics, Metadata, ...")
    api_key: int = Field(ge=0, le=32767)
    api_version: int = Field(ge=0, le=32767)
    action: RecordedAction = Field(
        description="a topic action, admin_api, or alter_broker_config (a non-topic config)"
    )
    # Absent in v1 records (a topic, then), always there in v2.
    resource_type: ResourceType | None = Field(
        None, description="what the decision is about (v2; absent in v1: topic)"
    )
    resource: str | None = Field(
        None, description="its name: the topic, or for `api` the API name (v2; absent in v1)"
    )
    topic: str | None = Field(
        description="for a delete by id, the name the id resolved to; null if not a topic"
    )
    validate_only: bool
    decision: Outcome
    mode: Mode = Field(description="audit when the whole policy runs as a dry run")
    violations: list[RecordedViolation] = Field(description="every violated rule, in rule order")
    request: dict[str, Any] = Field(
        description="as judged: `TopicRequest.to_dict()`, the API call for admin_api, or "
        "`BrokerConfigRequest.to_dict()` with the granting `rules` and the topics it would "
        "put `outside` the topic rules for alter_broker_config; for a request refused "
        "before SASL authentication completed, `refused`, `api`, `listener`, `sasl_state`"
    )
    overrides: list[RecordedOverride] | None = Field(
        None, description="what the policy's override actions changed; absent if nothing"
    )
    rewritten: dict[str, Any] | None = Field(
        None,
        description="the request as the overrides left it, which is what was judged and "
        "forwarded (`request` is what the client sent); absent if nothing changed",
    )
    budgets: list[RecordedBudget] | None = Field(
        None,
        description="the budgets the topic was judged against, one per limit the request "
        "changes; absent if none",
    )
    waived: list[RecordedWaiver] | None = Field(
        None,
        description="enforced violations that exceptions in force waived (they are not in "
        "`violations`); absent if none",
    )
    summary: RecordedSummary | None = Field(
        None,
        description="a summary record's counts and sample (schema 3, `resource_type: "
        "topics`); absent in every other record",
    )
    in_use: RecordedUsage | None = Field(
        None,
        description="the in-use facts (latest writes, consumer groups) an `in_use` rule read "
        "for this delete or DeleteRecords; absent otherwise",
    )

    @model_validator(mode="after")
    def _by_version(self) -> Self:
        present = set(V2_FIELDS) & self.model_fields_set
        if self.schema_ >= 2 and len(present) < len(V2_FIELDS):
            raise ValueError(f"schema 2 needs {', '.join(sorted(set(V2_FIELDS) - present))}")
        if self.schema_ == 1 and present:
            raise ValueError(f"schema 1 has no {', '.join(sorted(present))}")
        is_topic = self.resource_type in (None, ResourceType.TOPIC)
        if is_topic != (self.topic is not None):
            raise ValueError("`topic` is set exactly when the resource is a topic")
        is_summary = self.resource_type is ResourceType.TOPICS
        if len({is_summary, self.schema_ == SUMMARY_SCHEMA_VERSION, self.summary is not None}) > 1:
            raise ValueError("schema 3, `resource_type: topics` and `summary` go together")
        if (is_topic or is_summary) == (self.action in NOT_TOPIC_ACTIONS):
            raise ValueError(
                "`action` is admin_api or alter_broker_config exactly when the resource is "
                "not a topic"
            )
        return self


def json_schema() -> dict[str, Any]:
    """The record's JSON Schema (draft 2020-12): v2 records have the v2 fields, v1 lack them."""
    schema = DecisionRecord.model_json_schema(by_alias=True)
    for name in V2_FIELDS:
        del schema["properties"][name]["default"]  # absent, not null, in v1
    # A v2 record has every v2 field (cluster_id may be null); a v1 record has none.
    by_version = {
        "if": {"properties": {"schema": {"const": 1}}, "required": ["schema"]},
        "then": {"not": {"anyOf": [{"required": [name]} for name in V2_FIELDS]}},
        "else": {"required": list(V2_FIELDS)},
    }
    # A topic record names its topic; any other names none, and only a topic record or a
    # summary of topics takes a topic action.
    topic_actions = sorted(t.value for t in TOPIC_ACTION_RESOURCES)
    not_topic = {
        "properties": {"resource_type": {"not": {"enum": topic_actions}}},
        "required": ["resource_type"],
    }
    summary = {
        "properties": {"resource_type": {"const": ResourceType.TOPICS.value}},
        "required": ["resource_type"],
    }
    not_topic_actions = sorted(a.value for a in NOT_TOPIC_ACTIONS)
    by_resource = {
        "if": not_topic,
        "then": {"properties": {"topic": {"type": "null"}, "action": {"enum": not_topic_actions}}},
        "else": {
            "properties": {"action": {"not": {"enum": not_topic_actions}}},
            "if": summary,
            "then": {
                "properties": {"topic": {"type": "null"}, "schema": {"const": 3}},
                "required": ["summary"],
            },
            "else": {"properties": {"topic": {"type": "string"}, "summary": {"type": "null"}}},
        },
    }
    # Schema 3 is the summary record's alone.
    by_summary = {
        "if": {"properties": {"schema": {"const": SUMMARY_SCHEMA_VERSION}}, "required": ["schema"]},
        "then": summary,
    }
    return {
        "$schema": JSON_SCHEMA_DIALECT,
        **schema,
        "allOf": [by_version, by_resource, by_summary],
    }
