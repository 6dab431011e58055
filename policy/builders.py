"""Turn the codec's per-topic data into `TopicRequest`s, with Kafka's config semantics.

The proxy maps wire fields onto these functions and nothing more. Each builder takes the
current state and broker defaults when they are known; when they are not, build first, ask
`compiled.needs(request)` what to fetch, then call `resolve(request, cluster, facts)`, which
recomputes the requested state exactly as the builder would have with those facts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from uuid import UUID

from kafka_policy_proxy.policy.cluster import ClusterState
from kafka_policy_proxy.policy.configs import apply_create, apply_incremental, apply_replace
from kafka_policy_proxy.policy.model import (
    Action,
    AlterKind,
    Assignment,
    ConfigChange,
    ConfigMap,
    ConfigOp,
    ConfigSource,
    Fact,
    Principal,
    RequestedState,
    TopicRequest,
    TopicState,
    freeze_assignment,
)

# Broker configs a ClusterState's defaults may carry to resolve -1 on CreateTopics; they are
# not topic configs, so they never appear in a topic's effective configs.
DEFAULT_PARTITIONS_KEY = "num.partitions"
DEFAULT_REPLICATION_KEY = "default.replication.factor"
BROKER_ONLY_DEFAULTS = frozenset({DEFAULT_PARTITIONS_KEY, DEFAULT_REPLICATION_KEY})

WireAssignment = Iterable[tuple[int, Iterable[int]]]


def create_request(
    topic: str,
    partitions: int = -1,
    replication_factor: int = -1,
    assignment: WireAssignment | None = None,
    configs: Iterable[tuple[str, str | None]] = (),
    *,
    principal: Principal,
    validate_only: bool = False,
    defaults: Mapping[str, str | None] | None = None,
) -> TopicRequest:
    """CreateTopics (or Metadata auto-creation): -1 means the broker default."""
    frozen = freeze_assignment(assignment)
    explicit = bool(frozen)
    if explicit:
        partitions, replication_factor = len(frozen), len(frozen[0][1])
    changes = tuple(ConfigChange(n, ConfigOp.SET, v) for n, v in configs)
    # What `_with_facts` makes of a create, built once (a 1,000-topic batch builds 1,000).
    requested = RequestedState(
        partitions if partitions >= 0 else _default_int(defaults, DEFAULT_PARTITIONS_KEY),
        replication_factor
        if replication_factor >= 0
        else _default_int(defaults, DEFAULT_REPLICATION_KEY),
        frozen,
        not explicit,
        apply_create(changes, _topic_defaults(defaults)),
        changes,
        ConfigSource.CREATE,
    )
    return TopicRequest(topic, Action.CREATE, principal, None, None, validate_only, requested)


def alter_configs_request(
    topic: str,
    configs: Iterable[tuple[str, str | None]],
    *,
    principal: Principal,
    validate_only: bool = False,
    current: TopicState | None = None,
    defaults: Mapping[str, str | None] | None = None,
) -> TopicRequest:
    """AlterConfigs: the full set of configs; anything not sent goes back to its default."""
    changes = tuple(ConfigChange(n, ConfigOp.SET, v) for n, v in configs)
    return _alter_configs(
        topic,
        changes,
        ConfigSource.REPLACE,
        principal=principal,
        validate_only=validate_only,
        current=current,
        defaults=defaults,
    )


def incremental_alter_configs_request(
    topic: str,
    changes: Iterable[tuple[str, str | ConfigOp, str | None]],
    *,
    principal: Principal,
    validate_only: bool = False,
    current: TopicState | None = None,
    defaults: Mapping[str, str | None] | None = None,
) -> TopicRequest:
    """IncrementalAlterConfigs: (name, SET|DELETE|APPEND|SUBTRACT, value) against current."""
    frozen = tuple(ConfigChange(n, ConfigOp(op), v) for n, op, v in changes)
    return _alter_configs(
        topic,
        frozen,
        ConfigSource.INCREMENTAL,
        principal=principal,
        validate_only=validate_only,
        current=current,
        defaults=defaults,
    )


def create_partitions_request(
    topic: str,
    count: int,
    assignment: Sequence[Iterable[int]] | None = None,
    *,
    principal: Principal,
    validate_only: bool = False,
    current: TopicState | None = None,
) -> TopicRequest:
    """CreatePartitions: the new total count and, optionally, replicas for each new partition."""
    first_new = count - len(assignment) if assignment else count
    frozen = freeze_assignment((first_new + i, r) for i, r in enumerate(assignment or ()))
    requested = RequestedState(
        partitions=count,
        assignment=frozen,
        generated_assignment=not frozen,
    )
    request = TopicRequest(
        topic=topic,
        action=Action.ALTER,
        alter_kind=AlterKind.PARTITIONS,
        principal=principal,
        validate_only=validate_only,
        requested=requested,
    )
    return _with_facts(request, current, None)


def reassignment_request(
    topic: str,
    reassignments: Iterable[tuple[int, Iterable[int] | None]],
    *,
    principal: Principal,
    current: TopicState | None = None,
) -> TopicRequest:
    """AlterPartitionReassignments: partition -> new replicas, or None to cancel."""
    moves = freeze_assignment((p, r) for p, r in reassignments if r is not None)
    request = TopicRequest(
        topic=topic,
        action=Action.ALTER,
        alter_kind=AlterKind.REASSIGNMENT,
        principal=principal,
        requested=RequestedState(assignment=moves, generated_assignment=False),
    )
    return _with_facts(request, current, None)


def delete_topic_request(
    topic: str | None,
    topic_id: str | UUID | None = None,
    *,
    principal: Principal,
    current: TopicState | None = None,
) -> TopicRequest:
    """DeleteTopics, by name or (v6+) by topic id (kept as its string form)."""
    request = TopicRequest(
        topic=topic,
        topic_id=None if topic_id is None else str(topic_id),
        action=Action.DELETE,
        principal=principal,
    )
    return _with_facts(request, current, None)


def delete_records_request(
    topic: str,
    offsets: Iterable[tuple[int, int]],
    *,
    principal: Principal,
    current: TopicState | None = None,
) -> TopicRequest:
    """DeleteRecords: partition -> offset to delete before (-1 = the high watermark)."""
    request = TopicRequest(
        topic=topic,
        action=Action.DELETE_RECORDS,
        principal=principal,
        record_offsets=tuple(sorted((int(p), int(o)) for p, o in offsets)),
    )
    return _with_facts(request, current, None)


def resolve(request: TopicRequest, cluster: ClusterState, facts: Iterable[Fact]) -> TopicRequest:
    """Fill in the current state and broker defaults named in `facts`, recomputing the rest."""
    wanted = frozenset(facts)
    current = request.current
    if Fact.TOPIC_STATE in wanted and current is None and request.action is not Action.CREATE:
        if request.topic is not None:
            current = cluster.topic(request.topic)
        elif request.topic_id is not None:
            current = cluster.topic_by_id(request.topic_id)
    defaults = cluster.broker_default_configs() if Fact.BROKER_DEFAULTS in wanted else None
    resolved = _with_facts(request, current, defaults)
    if Fact.TOPIC_USAGE in wanted and resolved.usage is None and resolved.name:
        return replace(resolved, usage=cluster.topic_usage(resolved.name))
    return resolved


def _alter_configs(
    topic: str,
    changes: tuple[ConfigChange, ...],
    source: ConfigSource,
    *,
    principal: Principal,
    validate_only: bool,
    current: TopicState | None,
    defaults: Mapping[str, str | None] | None,
) -> TopicRequest:
    request = TopicRequest(
        topic=topic,
        action=Action.ALTER,
        alter_kind=AlterKind.CONFIGS,
        principal=principal,
        validate_only=validate_only,
        requested=RequestedState(changes=changes, config_source=source),
    )
    return _with_facts(request, current, defaults)


class _TopicDefaults:
    """The broker defaults that are topic configs; worked out again only for defaults other
    than the (immutable) ones seen last, as a cluster hands out the same ones every time."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: tuple[ConfigMap | None, ConfigMap] = (None, ConfigMap())

    def __call__(self, defaults: Mapping[str, str | None] | None) -> Mapping[str, str | None]:
        last, topic = self._last
        if defaults is last:
            return topic
        topic = ConfigMap(
            {k: v for k, v in (defaults or {}).items() if k not in BROKER_ONLY_DEFAULTS}
        )
        if type(defaults) is ConfigMap:
            self._last = (defaults, topic)  # one atomic store: safe across threads
        return topic


_topic_defaults = _TopicDefaults()


def _default_int(defaults: Mapping[str, str | None] | None, key: str) -> int | None:
    raw = (defaults or {}).get(key)
    try:
        return None if raw is None else int(raw)
    except ValueError:
        return None


def _with_facts(
    request: TopicRequest,
    current: TopicState | None,
    defaults: Mapping[str, str | None] | None,
) -> TopicRequest:
    """Recompute the requested state from the request's own data plus the given facts."""
    req = request.requested
    if request.action is Action.CREATE:
        partitions = req.partitions
        if partitions is None:
            partitions = _default_int(defaults, DEFAULT_PARTITIONS_KEY)
        replication = req.replication_factor
        if replication is None:
            replication = _default_int(defaults, DEFAULT_REPLICATION_KEY)
        configs = apply_create(req.changes, _topic_defaults(defaults))
        requested = _requested(req, partitions, replication, req.assignment, configs)
        return _rebuilt(request, request.topic, request.topic_id, requested, request.current)

    base = current or TopicState(name=request.name)
    known = current is not None
    kind = request.alter_kind
    if kind is AlterKind.CONFIGS:
        if req.config_source is ConfigSource.REPLACE:
            configs = apply_replace(req.changes, _topic_defaults(defaults))
        else:
            configs = apply_incremental(req.changes, base.configs, _topic_defaults(defaults))
        requested = _requested(
            req,
            base.partitions if known else None,
            base.replication_factor if known else None,
            base.assignment,
            configs,
        )
    elif kind is AlterKind.PARTITIONS:
        replication = base.replication_factor if known else None
        if replication is None and req.assignment:
            replication = len(req.assignment[0][1])
        requested = _requested(req, req.partitions, replication, req.assignment, base.configs)
    elif kind is AlterKind.REASSIGNMENT:
        merged: Assignment = freeze_assignment(
            {**dict(base.assignment), **dict(req.assignment)}.items()
        )
        requested = _requested(
            req,
            base.partitions if known else None,
            min((len(r) for _, r in merged), default=None),
            merged,
            base.configs,
        )
    else:
        requested = req
    topic, topic_id = request.topic, request.topic_id
    if current is not None:
        # A delete by topic id learns its name here, a request by name its id.
        topic = current.name if topic is None else topic
        topic_id = current.topic_id if topic_id is None else topic_id
    return _rebuilt(request, topic, topic_id, requested, current)


# Built field by field: dataclasses.replace introspects the fields on every call, and this
# runs for every topic of every judged request.
def _requested(
    req: RequestedState,
    partitions: int | None,
    replication_factor: int | None,
    assignment: Assignment,
    configs: ConfigMap,
) -> RequestedState:
    return RequestedState(
        partitions,
        replication_factor,
        assignment,
        req.generated_assignment,
        configs,
        req.changes,
        req.config_source,
    )


def _rebuilt(
    request: TopicRequest,
    topic: str | None,
    topic_id: str | None,
    requested: RequestedState,
    current: TopicState | None,
) -> TopicRequest:
    return TopicRequest(
        topic,
        request.action,
        request.principal,
        topic_id,
        request.alter_kind,
        request.validate_only,
        requested,
        current,
        request.record_offsets,
        request.usage,
    )
