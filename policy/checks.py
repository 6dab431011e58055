"""Rule constraints compiled into small check functions, each bound to the actions it applies to.

A check returns None when the request passes, or the message after the `[rule]` prefix,
e.g. "topic 'orders' asks for 64 partitions; the limit is 12".
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from kafka_policy_proxy.policy.batch import BatchCluster, collision_key
from kafka_policy_proxy.policy.cluster import ClusterState
from kafka_policy_proxy.policy.configs import (
    ConfigType,
    config_type,
    describe,
    parse_bound,
    parse_value,
    split_list,
)
from kafka_policy_proxy.policy.model import (
    Action,
    AlterKind,
    ConfigOp,
    ConfigSource,
    Fact,
    TopicRequest,
)
from kafka_policy_proxy.policy.rules import ActionName, ConfigConstraint, Rule
from kafka_policy_proxy.policy.usage_checks import in_use_checks

ActionKey = tuple[Action, AlterKind | None]
CheckFn = Callable[[TopicRequest, ClusterState], str | None]

CREATE: ActionKey = (Action.CREATE, None)
ALTER_CONFIGS: ActionKey = (Action.ALTER, AlterKind.CONFIGS)
ALTER_PARTITIONS: ActionKey = (Action.ALTER, AlterKind.PARTITIONS)
REASSIGN: ActionKey = (Action.ALTER, AlterKind.REASSIGNMENT)
DELETE: ActionKey = (Action.DELETE, None)
DELETE_RECORDS: ActionKey = (Action.DELETE_RECORDS, None)
ALL_KEYS: tuple[ActionKey, ...] = (
    CREATE,
    ALTER_CONFIGS,
    ALTER_PARTITIONS,
    REASSIGN,
    DELETE,
    DELETE_RECORDS,
)
ACTION_KEYS: dict[ActionName, frozenset[ActionKey]] = {
    "create": frozenset({CREATE}),
    "alter": frozenset({ALTER_CONFIGS, ALTER_PARTITIONS, REASSIGN}),
    "alter:configs": frozenset({ALTER_CONFIGS}),
    "alter:partitions": frozenset({ALTER_PARTITIONS}),
    "alter:reassignment": frozenset({REASSIGN}),
    "delete": frozenset({DELETE}),
    "delete_records": frozenset({DELETE_RECORDS}),
}


class Verbatim(str):
    """A check's message reported as is, without the `[rule]` prefix: a broker policy's own
    message, which clients must see exactly as the broker would send it."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Check:
    """One compiled check, the action kinds it applies to, and the cluster facts it reads."""

    keys: frozenset[ActionKey]
    fn: CheckFn
    facts: frozenset[Fact] = frozenset()


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _suffix(rule: Rule) -> str:
    return f" ({rule.message})" if rule.message else ""


def compile_rule(rule: Rule) -> list[Check]:
    """Compile a constraint rule's checks, in a fixed order (name, partitions, replication,
    configs in key order, deny, cluster, in use)."""
    checks: list[Check] = []
    if rule.name_pattern is not None:
        checks.append(_name_pattern(re.compile(rule.name_pattern), rule))
    if rule.name_collision:
        checks.append(Check(frozenset({CREATE}), _CollisionIndex(), frozenset({Fact.TOPIC_NAMES})))
    if rule.partitions is not None:
        checks.extend(_partitions(rule.partitions.min, rule.partitions.max, rule))
        if rule.partitions.max_increase is not None:
            checks.append(_max_increase(rule.partitions.max_increase))
    if rule.replication is not None:
        checks.extend(_replication(rule.replication.min, rule.replication.max))
        if not rule.replication.explicit_assignment:
            checks.append(Check(frozenset({CREATE, ALTER_PARTITIONS}), _no_explicit_assignment))
    for key, constraint in rule.configs.items():
        checks.extend(_config_checks(key, constraint))
    if rule.deny:
        checks.append(_deny(rule))
    if rule.cluster is not None:
        limits = rule.cluster
        if limits.max_total_partitions is not None:
            checks.append(_partition_budget(limits.max_total_partitions))
        if limits.max_partitions_per_broker is not None:
            checks.append(_per_broker_budget(limits.max_partitions_per_broker))
        if limits.max_topics is not None:
            checks.append(_topic_budget(limits.max_topics))
    if rule.in_use is not None:
        checks.extend(
            # The topic's state too: a missing topic is answered as the broker would.
            Check(frozenset({(action, None)}), fn, frozenset({Fact.TOPIC_USAGE, Fact.TOPIC_STATE}))
            for action, fn in in_use_checks(rule.in_use, _suffix(rule)).items()
        )
    return checks


def _name_pattern(pattern: re.Pattern[str], rule: Rule) -> Check:
    fullmatch = pattern.fullmatch
    suffix = _suffix(rule)

    def check(request: TopicRequest, cluster: ClusterState) -> str | None:
        name = request.name
        if fullmatch(name):
            return None
        return f"topic {name!r} does not match the naming pattern '{pattern.pattern}'{suffix}"

    return Check(frozenset({CREATE}), check)


class _CollisionIndex:
    """collision key -> names, rebuilt only when the cluster's names are not already indexed.

    Also denies a new name that collides with one requested before it in the same batch
    (`policy.batch`), so the proxy and `policy eval` refuse `a.b` with `a_b` in one request.
    """

    def __init__(self) -> None:
        # The name set last handed out, the names indexed, the index.
        self._last: tuple[frozenset[str], frozenset[str], dict[str, list[str]]] = (
            frozenset(),
            frozenset(),
            {},
        )

    def __call__(self, request: TopicRequest, cluster: ClusterState) -> str | None:
        names = cluster.topic_names(include_internal=True)
        name = request.name
        last_names, indexed, index = self._last
        if names is not last_names:
            # The requester never collides with itself and candidates are checked against
            # `names`, so an index lacking only the requester still serves. New name sets that
            # differ from the last by the requester alone (a fresh snapshot of the same topics,
            # or the scan job's "every topic but this one") then cost a set difference.
            if not names - indexed <= {name}:
                indexed = names | {name}
                index = {}
                for existing in sorted(indexed):
                    index.setdefault(collision_key(existing), []).append(existing)
            self._last = (names, indexed, index)  # one atomic store: safe across threads
        for existing in index.get(collision_key(name), ()):
            if existing != name and existing in names:
                return (
                    f"topic {name!r} collides with existing topic {existing!r}: "
                    "'.' and '_' map to the same metric name"
                )
        if isinstance(cluster, BatchCluster):
            earlier = cluster.earlier_collision(name)
            if earlier is not None:
                return (
                    f"topic {name!r} collides with topic {earlier!r}, requested before it in the "
                    "same request: '.' and '_' map to the same metric name; only the first of "
                    "them may be created"
                )
        return None


def _partitions(low: int | None, high: int | None, rule: Rule) -> list[Check]:
    suffix = _suffix(rule)

    def check(request: TopicRequest, cluster: ClusterState) -> str | None:
        count = request.requested.partitions
        if count is None:
            return None
        if high is not None and count > high:
            return (
                f"topic {request.name!r} asks for {_plural(count, 'partition')}; "
                f"the limit is {high}{suffix}"
            )
        if low is not None and count < low:
            return (
                f"topic {request.name!r} asks for {_plural(count, 'partition')}; "
                f"the minimum is {low}{suffix}"
            )
        return None

    if low is None and high is None:
        return []
    # Only CreateTopics can leave the count to the broker default.
    return [
        Check(frozenset({CREATE}), check, frozenset({Fact.BROKER_DEFAULTS})),
        Check(frozenset({ALTER_PARTITIONS}), check),
    ]


def _max_increase(limit: int) -> Check:
    def check(request: TopicRequest, cluster: ClusterState) -> str | None:
        current, count = request.current, request.requested.partitions
        if current is None or count is None:
            return None
        added = count - current.partitions
        if added <= limit:
            return None
        return (
            f"topic {request.name!r} asks to grow from {current.partitions} to {count} "
            f"partitions (+{added}); the largest increase allowed is {limit}"
        )

    return Check(frozenset({ALTER_PARTITIONS}), check, frozenset({Fact.TOPIC_STATE}))


def _replication(low: int | None, high: int | None) -> list[Check]:
    def check(request: TopicRequest, cluster: ClusterState) -> str | None:
        requested = request.requested
        if request.action is Action.CREATE:
            if requested.replication_factor is None:
                return None
            smallest = largest = requested.replication_factor
        else:
            sizes = [len(replicas) for _, replicas in requested.assignment]
            if not sizes:
                return None
            smallest, largest = min(sizes), max(sizes)
        if high is not None and largest > high:
            return (
                f"topic {request.name!r} asks for replication factor {largest}; the limit is {high}"
            )
        if low is not None and smallest < low:
            return (
                f"topic {request.name!r} asks for replication factor {smallest}; "
                f"the minimum is {low}"
            )
        return None

    if low is None and high is None:
        return []
    return [
        Check(frozenset({CREATE}), check, frozenset({Fact.BROKER_DEFAULTS})),
        Check(frozenset({REASSIGN}), check, frozenset({Fact.TOPIC_STATE})),
    ]


def _no_explicit_assignment(request: TopicRequest, cluster: ClusterState) -> str | None:
    if request.requested.generated_assignment:
        return None
    return (
        f"topic {request.name!r} sets an explicit replica assignment; "
        "replicas must be placed by the broker"
    )


_DENY_TEXT: dict[ActionKey, str] = {
    CREATE: "may not be created",
    ALTER_CONFIGS: "may not have its configs changed",
    ALTER_PARTITIONS: "may not have partitions added",
    REASSIGN: "may not have its replicas reassigned",
    DELETE: "may not be deleted",
    DELETE_RECORDS: "may not have records deleted",
}


def _deny(rule: Rule) -> Check:
    suffix = _suffix(rule)

    def check(request: TopicRequest, cluster: ClusterState) -> str | None:
        text = _DENY_TEXT[(request.action, request.alter_kind)]
        return f"topic {request.name!r} {text}{suffix}"

    return Check(frozenset(ALL_KEYS), check)


def _added_partitions(request: TopicRequest) -> int | None:
    count = request.requested.partitions
    if count is None:
        return None
    if request.action is Action.CREATE:
        return count
    if request.current is None:
        return None
    return count - request.current.partitions


def _partition_budget(limit: int) -> Check:
    def check(request: TopicRequest, cluster: ClusterState) -> str | None:
        added = _added_partitions(request)
        if not added or added < 0:
            return None
        total = cluster.total_partitions() + added
        if total <= limit:
            return None
        return (
            f"topic {request.name!r} would bring the cluster to {total} partitions; "
            f"the budget is {limit}"
        )

    facts = frozenset({Fact.TOTAL_PARTITIONS, Fact.TOPIC_STATE, Fact.BROKER_DEFAULTS})
    return Check(frozenset({CREATE, ALTER_PARTITIONS}), check, facts)


def _per_broker_budget(limit: int) -> Check:
    def check(request: TopicRequest, cluster: ClusterState) -> str | None:
        added = _added_partitions(request)
        brokers = cluster.broker_count()
        if not added or added < 0 or brokers <= 0:
            return None
        per_broker = (cluster.total_partitions() + added) / brokers
        if per_broker <= limit:
            return None
        return (
            f"topic {request.name!r} would bring the cluster to {per_broker:g} partitions "
            f"per broker ({brokers} brokers); the limit is {limit}"
        )

    facts = frozenset(
        {Fact.TOTAL_PARTITIONS, Fact.BROKER_COUNT, Fact.TOPIC_STATE, Fact.BROKER_DEFAULTS}
    )
    return Check(frozenset({CREATE, ALTER_PARTITIONS}), check, facts)


def _topic_budget(limit: int) -> Check:
    def check(request: TopicRequest, cluster: ClusterState) -> str | None:
        count = len(cluster.topic_names()) + 1
        if count <= limit:
            return None
        return f"topic {request.name!r} would be topic number {count}; the limit is {limit} topics"

    return Check(frozenset({CREATE}), check, frozenset({Fact.TOPIC_NAMES}))


def _sets(change_op: ConfigOp, value: str | None) -> bool:
    return change_op is not ConfigOp.DELETE and not (change_op is ConfigOp.SET and value is None)


def _config_checks(key: str, constraint: ConfigConstraint) -> list[Check]:
    kind = config_type(key, constraint.type)
    checks: list[Check] = []
    on_configs = frozenset({CREATE, ALTER_CONFIGS})
    if constraint.forbidden:

        def forbidden(request: TopicRequest, cluster: ClusterState) -> str | None:
            if request.requested.config_source is ConfigSource.SNAPSHOT:
                return None  # which configs were set on the topic is not known
            for change in request.requested.changes:
                if change.name == key and _sets(change.op, change.value):
                    return f"topic {request.name!r} sets {key}, which may not be set"
            return None

        checks.append(Check(on_configs, forbidden))
    if constraint.required:

        def required(request: TopicRequest, cluster: ClusterState) -> str | None:
            requested = request.requested
            if requested.config_source is ConfigSource.SNAPSHOT:
                return None  # which configs were set on the topic is not known
            ops = [c for c in requested.changes if c.name == key]
            if requested.config_source is ConfigSource.INCREMENTAL:
                if any(c.op is ConfigOp.DELETE for c in ops):
                    return f"topic {request.name!r} resets {key} to its default; it must be set"
                return None
            if any(_sets(c.op, c.value) for c in ops):
                return None
            return f"topic {request.name!r} does not set {key}; it must be set"

        checks.append(Check(on_configs, required))
    if constraint.immutable:

        def immutable(request: TopicRequest, cluster: ClusterState) -> str | None:
            current = request.current
            if current is None:
                return None
            before, after = current.configs.get(key), request.requested.configs.get(key)
            if before == after:
                return None
            return (
                f"topic {request.name!r} changes {key} from {before!r} to {after!r}; "
                "it cannot change after the topic is created"
            )

        facts = frozenset({Fact.TOPIC_STATE, Fact.BROKER_DEFAULTS})
        checks.append(Check(frozenset({ALTER_CONFIGS}), immutable, facts))
    value_check = _value_check(key, kind, constraint)
    if value_check is not None:
        facts = frozenset({Fact.TOPIC_STATE, Fact.BROKER_DEFAULTS})
        checks.append(Check(on_configs, value_check, facts))
    return checks


_VERDICT_CACHE = 4096
_UNSEEN = object()


def value_verdict(
    key: str, kind: ConfigType, constraint: ConfigConstraint
) -> Callable[[str], str | None] | None:
    """The bounds as a check of one value (None: passes; else the message's end, such as
    " 5; the limit is 3"), or None if the constraint bounds no value."""
    low = None if constraint.min is None else parse_bound(constraint.min, kind)
    high = None if constraint.max is None else parse_bound(constraint.max, kind)
    allowed = None if constraint.values is None else frozenset(constraint.values)
    pattern = None if constraint.pattern is None else re.compile(constraint.pattern)
    if low is None and high is None and allowed is None and pattern is None:
        return None
    numeric = low is not None or high is not None

    def verdict(value: str) -> str | None:
        if numeric:
            number = parse_value(key, value)
            if number is None:
                return f" {value!r}, which is not a {kind.value}"
            if high is not None and number > high:
                return f" {describe(number, kind)}; the limit is {describe(high, kind)}"
            if low is not None and number < low:
                return f" {describe(number, kind)}; the minimum is {describe(low, kind)}"
        if allowed is not None:
            items = split_list(value) if kind is ConfigType.LIST else [value]
            if any(item not in allowed for item in items):
                choices = ", ".join(repr(v) for v in sorted(allowed))
                return f" {value!r}; allowed values are {choices}"
        if pattern is not None and not pattern.fullmatch(value):
            return f" {value!r}, which does not match '{pattern.pattern}'"
        return None

    return verdict


def _value_check(key: str, kind: ConfigType, constraint: ConfigConstraint) -> CheckFn | None:
    verdict = value_verdict(key, kind, constraint)
    if verdict is None:
        return None

    # Most requests carry the same few values (often the defaults): remember the verdicts.
    verdicts: dict[str, str | None] = {}

    def check(request: TopicRequest, cluster: ClusterState) -> str | None:
        requested = request.requested
        value = requested.configs.get(key)
        if value is None:
            return None
        tail = verdicts.get(value, _UNSEEN)
        if tail is _UNSEEN:
            tail = verdict(value)
            if len(verdicts) < _VERDICT_CACHE:
                verdicts[value] = tail  # a single dict store: safe across threads
        if tail is None:
            return None
        named = key in requested.named
        current = request.current
        if requested.config_source is ConfigSource.SNAPSHOT:
            how = f"has {key} ="  # set on the topic or inherited: not known
        elif request.action is Action.ALTER and not named:
            # An alter only answers for what it changes, so legacy topics stay editable.
            if current is None or current.configs.get(key) == value:
                return None
            how = f"resets {key} to its default"
        elif named:
            how = f"sets {key} to"
        else:
            how = f"gets the broker default {key} ="
        return f"topic {request.name!r} {how}{tail}"

    return check
