"""Turn the codec's per-topic data into `TopicRequest`s, with Kafka's config semantics.

The proxy maps wire fields onto these functions and nothing more. Each builder takes the
current state and broker defaults when they are known; when they are not, build first, ask
`compiled.needs(request)` what to fetch, then call `resolve(request, cluster, facts)`, which
recomputes the requested state exactly as the builder would have with those facts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from uuid import UUID

from kafka_policy_proxy.policy.cluster import ClusterState
from kafka_policy_proxy.policy.configs import apply_create, apply_incremental
from kafka_policy_proxy.policy.model import (
    EMPTY_CONFIGS,
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
    assembler,
    freeze_assignment,
)

# Broker configs a ClusterState's defaults may carry to resolve -1 on CreateTopics; they are
# not topic configs, so they never appear in a topic's effective configs.
DEFAULT_PARTITIONS_KEY = "num.partitions"
DEFAULT_REPLICATION_KEY = "default.replication.factor"
BROKER_ONLY_DEFAULTS = frozenset({DEFAULT_PARTITIONS_KEY, DEFAULT_REPLICATION_KEY})

WireAssignment = Iterable[tuple[int, Iterable[int]]]
# Every field given, derived ones too: `__init__` re-derives nothing a builder already knows.
_REQUESTED = assembler(RequestedState)
_TOPIC_REQUEST = assembler(TopicRequest)
_set_change = assembler(ConfigChange)


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
    frozen = freeze_assignment(assignment) if assignment else ()
    explicit = bool(frozen)
    if explicit:
        partitions, replication_factor = len(frozen), len(frozen[0][1])
    changes, named, bare = _named_configs(configs)
    # What `_with_facts` makes of a create, built once (a 1,000-topic batch builds 1,000), by
    # the assemblers: every field given, `named` and `name` too.
    requested = _REQUESTED(
        partitions if partitions >= 0 else _default_int(defaults, DEFAULT_PARTITIONS_KEY),
        replication_factor
        if replication_factor >= 0
        else _default_int(defaults, DEFAULT_REPLICATION_KEY),
        frozen,
        not explicit,
        bare if defaults is None else apply_create(changes, _topic_defaults(defaults)),
        changes,
        ConfigSource.CREATE,
        named,
    )
    return _TOPIC_REQUEST(
        topic,
        Action.CREATE,
        principal,
        None,
        None,
        validate_only,
        requested,
        None,
        (),
        None,
        topic,
    )


# A create's named configs: the changes, their names, and the configs over no defaults.
_Named = tuple[tuple[ConfigChange, ...], frozenset[str], ConfigMap]


class _LastNamed:
    """A create's named configs, as the changes, their names and the configs over no defaults:
    those of the create before when it named the same list (a batch's topics often do), so
    built once for them all. One entry: nothing is kept past the next create that differs."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: tuple[tuple[tuple[str, str | None], ...], _Named] | None = None

    def __call__(self, configs: Iterable[tuple[str, str | None]]) -> _Named:
        key = tuple(configs)
        last = self._last
        if last is not None and last[0] == key:
            return last[1]
        changes = tuple([_set_change(n, ConfigOp.SET, v) for n, v in key])
        named = (
            changes,
            frozenset([c.name for c in changes]),
            apply_create(changes, EMPTY_CONFIGS),
        )
        self._last = (key, named)  # one atomic store: safe across threads
        return named


_named_configs = _LastNamed()


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
    return FactFolder(cluster, facts)(request)


class FactFolder:
    """`resolve` for the requests of one batch: what their topics share is worked out once (the
    broker defaults' counts and topic configs), and a create's (or a full replacement's)
    configs once per distinct list of named configs (a batch's topics often name the same),
    one immutable ConfigMap shared by all of them."""

    __slots__ = ("_cluster", "_defaults", "_state", "_usage")

    def __init__(self, cluster: ClusterState, facts: Iterable[Fact]) -> None:
        wanted = frozenset(facts)
        self._cluster = cluster
        self._state = Fact.TOPIC_STATE in wanted
        self._usage = Fact.TOPIC_USAGE in wanted
        self._defaults = (
            _Defaults(cluster.broker_default_configs(), shared=True)
            if Fact.BROKER_DEFAULTS in wanted
            else _NO_DEFAULTS
        )

    def __call__(self, request: TopicRequest) -> TopicRequest:
        """The request with this batch's facts folded in."""
        current = request.current
        if self._state and current is None and request.action is not Action.CREATE:
            if request.topic is not None:
                current = self._cluster.topic(request.topic)
            elif request.topic_id is not None:
                current = self._cluster.topic_by_id(request.topic_id)
        resolved = _fold(request, current, self._defaults)
        if self._usage and resolved.usage is None and resolved.name:
            usage = self._cluster.topic_usage(resolved.name)
            return resolved.folded(
                resolved.topic, resolved.topic_id, resolved.requested, resolved.current, usage
            )
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
        if defaults is None:
            return EMPTY_CONFIGS
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


class _Defaults:
    """What a request's state takes from the broker defaults: the partition and replication
    counts, and the topic configs; `shared`, the configs over them of each list of named
    configs, kept for the next request naming the same (a batch's: bounded by its size).
    Consecutive creates that named the same list share its changes (`_LastNamed`): found by
    identity, without hashing them."""

    __slots__ = ("_last", "_over", "configs", "partitions", "replication")

    def __init__(self, defaults: Mapping[str, str | None] | None, *, shared: bool = False) -> None:
        self.partitions = _default_int(defaults, DEFAULT_PARTITIONS_KEY)
        self.replication = _default_int(defaults, DEFAULT_REPLICATION_KEY)
        self.configs = _topic_defaults(defaults)
        self._over: dict[tuple[ConfigChange, ...], ConfigMap] | None = {} if shared else None
        self._last: tuple[tuple[ConfigChange, ...], ConfigMap] | None = None

    def over(self, changes: tuple[ConfigChange, ...]) -> ConfigMap:
        """CreateTopics' and AlterConfigs' configs: the named ones over the topic defaults."""
        if self._over is None:
            return apply_create(changes, self.configs)
        last = self._last
        if last is not None and last[0] is changes:
            return last[1]
        configs = self._over.get(changes)
        if configs is None:
            configs = self._over[changes] = apply_create(changes, self.configs)
        self._last = (changes, configs)
        return configs


_NO_DEFAULTS = _Defaults(None)


def _with_facts(
    request: TopicRequest,
    current: TopicState | None,
    defaults: Mapping[str, str | None] | None,
) -> TopicRequest:
    """Recompute the requested state from the request's own data plus the given facts."""
    return _fold(request, current, _NO_DEFAULTS if defaults is None else _Defaults(defaults))


def _fold(request: TopicRequest, current: TopicState | None, defaults: _Defaults) -> TopicRequest:
    """`_with_facts`, with the broker defaults worked out."""
    req = request.requested
    if request.action is Action.CREATE:
        partitions = req.partitions
        if partitions is None:
            partitions = defaults.partitions
        replication = req.replication_factor
        if replication is None:
            replication = defaults.replication
        requested = req.folded(partitions, replication, req.assignment, defaults.over(req.changes))
        return request.folded(
            request.topic, request.topic_id, requested, request.current, request.usage
        )

    base = current or TopicState(name=request.name)
    known = current is not None
    kind = request.alter_kind
    if kind is AlterKind.CONFIGS:
        if req.config_source is ConfigSource.REPLACE:
            configs = defaults.over(req.changes)  # AlterConfigs: as a create's
        else:
            configs = apply_incremental(req.changes, base.configs, defaults.configs)
        requested = req.folded(
            base.partitions if known else None,
            base.replication_factor if known else None,
            base.assignment,
            configs,
        )
    elif kind is AlterKind.PARTITIONS:
        replication = base.replication_factor if known else None
        if replication is None and req.assignment:
            replication = len(req.assignment[0][1])
        requested = req.folded(req.partitions, replication, req.assignment, base.configs)
    elif kind is AlterKind.REASSIGNMENT:
        merged: Assignment = freeze_assignment(
            {**dict(base.assignment), **dict(req.assignment)}.items()
        )
        requested = req.folded(
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
    return request.folded(topic, topic_id, requested, current, request.usage)
