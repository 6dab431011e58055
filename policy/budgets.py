"""Budgets (`budgets:` in the policy): what a principal or topic scope may hold in the cluster.

A budget counts the topics its scope matches (`topic_prefix`, `topic`; a `{user}` in the
prefix makes one budget per principal over that principal's prefix) and limits their number,
their partitions (or replicas: partitions x replication factor) and their retention bytes
(partitions x retention.bytes, the broker default where a topic sets none; -1 is unlimited).
It judges the creates, partition increases and config changes of the principals it selects on
the topics it counts, against the cluster AFTER the request: the usage read from the facts,
plus what the batch's earlier allowed topics add to the same budget (in request order: the
first that fits takes it), plus what this topic adds. Only what adds is judged: a change that
lowers usage, or adds nothing, always fits.

Pure: the judge (policy/judge.py) calls `BudgetBook.judge` for each topic of a batch.
"""

from __future__ import annotations

import fnmatch
import math
import re
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from kafka_policy_proxy.policy.cluster import ClusterState, InMemoryCluster, is_internal
from kafka_policy_proxy.policy.configs import parse_value
from kafka_policy_proxy.policy.model import (
    Action,
    AlterKind,
    BudgetUse,
    Decision,
    Fact,
    Mode,
    TopicRequest,
    TopicState,
    Violation,
    assembler,
)
from kafka_policy_proxy.policy.rules import USER_PLACEHOLDER, Budget, PolicyDocument

RETENTION = "retention.bytes"
# Kafka's default for log.retention.bytes: no size limit.
KAFKA_DEFAULT_RETENTION = "-1"
TOPICS, PARTITIONS, REPLICAS, RETENTION_BYTES = (
    "topics",
    "partitions",
    "replicas",
    "retention_bytes",
)
_UNIT_TEXT = {
    TOPICS: "topics",
    PARTITIONS: "partitions",
    REPLICAS: "replicas (partitions x replication factor)",
    RETENTION_BYTES: "retention bytes (partitions x retention.bytes)",
}
# Facts a judged request needs: the counted topics, its own state, the create defaults.
NEEDS_CREATE = frozenset({Fact.BUDGET_USAGE, Fact.BROKER_DEFAULTS})
NEEDS_ALTER = frozenset({Fact.BUDGET_USAGE, Fact.BROKER_DEFAULTS, Fact.TOPIC_STATE})
# A memo's bound, as the engine's plan cache: a flood of principals cannot grow it.
_MEMO_SIZE = 4096


def user_of(principal: str) -> str:
    """The principal's name after `User:` (the whole name for another principal type)."""
    kind, sep, name = principal.partition(":")
    return name if sep and kind == "User" else principal


@dataclass(frozen=True, slots=True)
class BudgetKey:
    """One budget's counter: the budget, and the user its `{user}` resolved to ('' if none)."""

    name: str
    user: str = ""

    @property
    def text(self) -> str:
        """How messages name it: the user of a per-principal budget, else the budget."""
        return self.user or self.name


class CompiledBudget:
    """A budget with its principal globs and topic scope compiled.

    It keeps the cluster whose usage it last counted (one atomic store: safe across threads):
    a replay judges every create against the same snapshot, and a frozen `InMemoryCluster`
    always counts the same.
    """

    __slots__ = ("_counters", "_last", "_principals", "_reached", "_topic", "per_user", "spec")

    def __init__(self, spec: Budget) -> None:
        self.spec = spec
        self._last: tuple[object, dict[str, Usage]] = (None, {})
        # principal -> its counter, None if the budget does not select it (bounded).
        self._counters: dict[str, BudgetKey | None] = {}
        # The alter kinds (None: a create) whose requests can change what the budget limits:
        # a config change only retention bytes, a partition increase partitions (or replicas)
        # and retention bytes.
        unreached: set[AlterKind] = set()
        if spec.max_retention_bytes is None:
            unreached.add(AlterKind.CONFIGS)
            if spec.max_partitions is None:
                unreached.add(AlterKind.PARTITIONS)
        self._reached: frozenset[AlterKind | None] = frozenset({None, *AlterKind}) - unreached
        self.per_user = spec.topic_prefix is not None and USER_PLACEHOLDER in spec.topic_prefix
        self._principals = (
            None
            if spec.principals is None
            else re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in spec.principals))
        )
        self._topic = None if spec.topic is None else re.compile(spec.topic, re.DOTALL)

    def selects(self, principal: str) -> bool:
        """Whether the budget judges this principal's requests."""
        return self._principals is None or self._principals.match(principal) is not None

    def key(self, principal: str) -> BudgetKey:
        """The counter a request of this principal goes to."""
        return BudgetKey(self.spec.name, user_of(principal) if self.per_user else "")

    def counter(self, principal: str) -> BudgetKey | None:
        """The counter of a principal the budget selects, else None (worked out once each)."""
        try:
            return self._counters[principal]
        except KeyError:
            pass
        found = self.key(principal) if self.selects(principal) else None
        if len(self._counters) < _MEMO_SIZE:
            self._counters[principal] = found
        return found

    def counts(self, topic: str, user: str = "") -> bool:
        """Whether the topic is in the budget's scope (its `{user}` resolved to `user`)."""
        prefix = self.spec.topic_prefix
        if prefix is not None:
            if self.per_user:
                prefix = prefix.replace(USER_PLACEHOLDER, user)
            if not topic.startswith(prefix):
                return False
        return self._topic is None or self._topic.fullmatch(topic) is not None

    def owner(self, topic: str) -> str | None:
        """The user whose per-principal scope counts this topic, if the name tells it."""
        prefix = self.spec.topic_prefix or ""
        head, _, tail = prefix.partition(USER_PLACEHOLDER)
        if not topic.startswith(head):
            return None
        rest = topic[len(head) :]
        end = rest.find(tail) if tail else len(rest)
        user = rest[:end] if end > 0 else ""
        if not user or not self.counts(topic, user):
            return None
        return user if self.selects(f"User:{user}") else None

    def limits(self) -> list[tuple[str, int]]:
        """(unit, limit) for each limit the budget sets."""
        spec = self.spec
        limits: list[tuple[str, int]] = []
        if spec.max_topics is not None:
            limits.append((TOPICS, spec.max_topics))
        if spec.max_partitions is not None:
            limits.append((REPLICAS if spec.count_replicas else PARTITIONS, spec.max_partitions))
        if spec.max_retention_bytes is not None:
            limits.append((RETENTION_BYTES, int(spec.max_retention_bytes)))
        return limits


def compile_budgets(document: PolicyDocument) -> tuple[CompiledBudget, ...]:
    """The policy's budgets, compiled, in declaration order."""
    return tuple(CompiledBudget(b) for b in document.budgets)


def budget_for_topic(budgets: Sequence[CompiledBudget], topic: str) -> str | None:
    """The first budget whose scope counts the topic (a per-principal budget by the user its
    prefix names): its key as messages print it (the user, or the budget's name); else None."""
    for budget in budgets:
        if budget.per_user:
            user = budget.owner(topic)
            if user is not None:
                return user
        elif budget.counts(topic):
            return budget.spec.name
    return None


def _judged(request: TopicRequest) -> bool:
    """Whether the action can add to a budget: creates, partition increases, config changes."""
    return request.action is Action.CREATE or (
        request.action is Action.ALTER
        and request.alter_kind in (AlterKind.PARTITIONS, AlterKind.CONFIGS)
    )


def touched(
    budgets: Sequence[CompiledBudget], request: TopicRequest
) -> list[tuple[CompiledBudget, BudgetKey]]:
    """The budgets that judge this request (those whose limits it can change), with the
    counter each goes to."""
    name = request.name
    if not budgets or not name or not _judged(request) or is_internal(name):
        return []
    principal = request.principal.name
    kind = request.alter_kind
    found = []
    for budget in budgets:
        key = budget.counter(principal)
        if key is not None and kind in budget._reached and budget.counts(name, key.user):
            found.append((budget, key))
    return found


def keys_of(budgets: Sequence[CompiledBudget], requests: Iterable[TopicRequest]) -> list[BudgetKey]:
    """Every counter a batch touches, sorted (the order the proxy takes their locks in)."""
    keys = {key for request in requests for _, key in touched(budgets, request)}
    return sorted(keys, key=lambda k: (k.name, k.user))


def needs(budgets: Sequence[CompiledBudget], request: TopicRequest) -> frozenset[Fact]:
    """The facts the budgets judging this request read."""
    return facts_of(request, touched(budgets, request))


def facts_of(request: TopicRequest, found: Sequence[object]) -> frozenset[Fact]:
    """The facts read by the budgets `touched` found for this request."""
    if not found:
        return frozenset()
    return NEEDS_CREATE if request.action is Action.CREATE else NEEDS_ALTER


@dataclass(frozen=True, slots=True)
class BudgetScope:
    """The topics whose configs a batch's budgets read (those with a retention limit)."""

    scopes: tuple[tuple[CompiledBudget, str], ...]

    def __call__(self, topic: str) -> bool:
        """Whether a retention budget of the batch counts the topic."""
        return any(budget.counts(topic, user) for budget, user in self.scopes)


def retention_scope(
    found: Iterable[Sequence[tuple[CompiledBudget, BudgetKey]]],
) -> BudgetScope | None:
    """The scope whose topics' configs the batch's retention budgets need, from what `touched`
    found for each request; None if none does."""
    scopes = {
        (budget.spec.name, key.user): (budget, key.user)
        for touches in found
        for budget, key in touches
        if budget.spec.max_retention_bytes is not None
    }
    return BudgetScope(tuple(scopes.values())) if scopes else None


# -- usage arithmetic


def retention_of(configs: dict[str, str | None] | None, defaults: dict[str, str | None]) -> float:
    """A topic's retention.bytes (its own, else the broker default, else Kafka's -1); inf if
    unlimited."""
    value = (configs or {}).get(RETENTION)
    if value is None:
        value = defaults.get(RETENTION) or KAFKA_DEFAULT_RETENTION
    number = parse_value(RETENTION, value)
    return math.inf if number is None or number < 0 else number


def _amounts(
    state: TopicState, defaults: dict[str, str | None], retention: bool = True
) -> dict[str, float]:
    return _amounts_of(
        state.partitions, state.replication_factor, state.configs, defaults, retention
    )


def _amounts_of(
    partitions: int,
    replication_factor: int,
    configs: dict[str, str | None],
    defaults: dict[str, str | None],
    retention: bool = True,
) -> dict[str, float]:
    bytes_ = partitions * retention_of(configs, defaults) if retention and partitions else 0
    return {
        TOPICS: 1,
        PARTITIONS: partitions,
        REPLICAS: partitions * replication_factor,
        RETENTION_BYTES: bytes_,
    }


@dataclass(slots=True)
class Usage:
    """A counter's usage per unit, and a topic that makes its retention unlimited, if any."""

    amounts: dict[str, float]
    unlimited_by: str | None = None


class _SortedNames:
    """The cluster's topic names in order, sorted again only for a name set not seen last
    (one atomic store: safe across threads)."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: tuple[frozenset[str], tuple[str, ...]] = (frozenset(), ())

    def __call__(self, cluster: ClusterState) -> tuple[str, ...]:
        names = cluster.topic_names()
        last, ordered = self._last
        if names is not last:
            ordered = tuple(sorted(names))
            self._last = (names, ordered)
        return ordered


sorted_names = _SortedNames()


def usage(budget: CompiledBudget, key: BudgetKey, cluster: ClusterState) -> Usage:
    """The counter's usage in the cluster as the facts show it (remembered per user for the
    frozen cluster counted last)."""
    if type(cluster) is not InMemoryCluster:
        return _count(budget, key, cluster)
    last, memo = budget._last
    if last is not cluster:
        memo = {}
        budget._last = (cluster, memo)
    found = memo.get(key.user)
    if found is None:
        found = _count(budget, key, cluster)
        if len(memo) < _MEMO_SIZE:
            memo[key.user] = found
    return found


def _count(budget: CompiledBudget, key: BudgetKey, cluster: ClusterState) -> Usage:
    defaults = dict(cluster.broker_default_configs())
    # Retention is read only where the budget limits it (the configs are read for no other).
    retention = budget.spec.max_retention_bytes is not None
    user = key.user
    prefix = budget.spec.topic_prefix
    if prefix is not None and budget.per_user:
        prefix = prefix.replace(USER_PLACEHOLDER, user)
    topic = budget._topic
    names = sorted_names(cluster)
    # The names with the prefix are adjacent in sorted order: only those are looked at.
    start = 0 if not prefix else bisect_left(names, prefix)
    # Summed unit by unit in name order, as `_amounts` gives them.
    topics = partitions = replicas = bytes_ = 0.0
    unlimited_by = None
    for index in range(start, len(names)):
        name = names[index]
        if prefix and not name.startswith(prefix):
            break
        if topic is not None and topic.fullmatch(name) is None:
            continue
        state = cluster.topic(name)
        if state is None:
            continue
        count = state.partitions
        topics += 1
        partitions += count
        replicas += count * state.replication_factor
        bytes_ += count * retention_of(state.configs, defaults) if retention and count else 0
        if unlimited_by is None and math.isinf(bytes_):
            unlimited_by = name
    total = {TOPICS: topics, PARTITIONS: partitions, REPLICAS: replicas, RETENTION_BYTES: bytes_}
    return Usage(total, unlimited_by)


def requested_state(request: TopicRequest, defaults: dict[str, str | None]) -> TopicState:
    """The topic as the request leaves it (what is unknown taken from the current state)."""
    current = request.current
    requested = request.requested
    partitions = requested.partitions
    factor = requested.replication_factor
    if request.action is Action.CREATE:
        partitions = partitions if partitions is not None else _int(defaults, "num.partitions")
        factor = factor if factor is not None else _int(defaults, "default.replication.factor")
        return TopicState(
            request.name,
            partitions=partitions,
            replication_factor=factor,
            configs=requested.configs,
        )
    assert current is not None
    if request.alter_kind is AlterKind.CONFIGS:
        return replace(current, configs=requested.configs)
    return replace(current, partitions=partitions if partitions is not None else current.partitions)


def _int(defaults: dict[str, str | None], key: str) -> int:
    try:
        return max(1, int(defaults.get(key) or 1))
    except ValueError:
        return 1


def change(request: TopicRequest, defaults: dict[str, str | None]) -> dict[str, float]:
    """What the request adds per unit (negative where it lowers usage)."""
    if request.action is Action.CREATE:
        # `requested_state`'s counts, without building the state: every create of a batch.
        requested = request.requested
        partitions, factor = requested.partitions, requested.replication_factor
        return _amounts_of(
            partitions if partitions is not None else _int(defaults, "num.partitions"),
            factor if factor is not None else _int(defaults, "default.replication.factor"),
            requested.configs,
            defaults,
        )
    after = _amounts(requested_state(request, defaults), defaults)
    assert request.current is not None
    before = _amounts(request.current, defaults)
    return {unit: _minus(after[unit], before[unit]) for unit in after}


def _minus(after: float, before: float) -> float:
    if math.isinf(after):
        return 0.0 if math.isinf(before) else math.inf
    return -math.inf if math.isinf(before) else after - before


_SIZES = ((1024**4, "TiB"), (1024**3, "GiB"), (1024**2, "MiB"), (1024, "KiB"))


def _shown(value: float, unit: str) -> str:
    if unit == RETENTION_BYTES:
        for factor, name in _SIZES:
            if value >= factor:
                return f"{value / factor:.4g}{name}"
        return f"{int(value)} bytes"
    return str(int(value))


def _whole(value: float) -> int | None:
    return None if math.isinf(value) else int(value)


# Built with every field given (no `__init__`): once or more for every topic a budget judges.
_BUDGET_USE = assembler(BudgetUse)
_DECISION = assembler(Decision)
_VIOLATION = assembler(Violation)


def _as_is(decision: Decision) -> Decision:
    return decision


@dataclass(slots=True)
class BudgetBook:
    """One batch's budget judgements: usage read once per counter, the batch's additions kept
    in request order."""

    budgets: tuple[CompiledBudget, ...]
    cluster: ClusterState
    dry_run: bool = False
    _usage: dict[BudgetKey, Usage] = field(default_factory=dict)
    _batch: dict[tuple[BudgetKey, str], float] = field(default_factory=dict)
    # The broker defaults, read once for the batch (the cluster does not change under it).
    _defaults: dict[str, str | None] | None = None

    def judge(
        self,
        request: TopicRequest,
        decision: Decision,
        settle: Callable[[Decision], Decision] = _as_is,
        found: Sequence[tuple[CompiledBudget, BudgetKey]] | None = None,
    ) -> Decision:
        """The decision with every budget that judges the request checked and recorded;
        `settle` (the exceptions' waivers) has the last word before the batch counts it.
        `found` is what `touched` found for the request, if the caller has it already."""
        if found is None:
            found = touched(self.budgets, request)
        if not found or (request.action is not Action.CREATE and request.current is None):
            return settle(decision)
        defaults = self._defaults
        if defaults is None:
            defaults = self._defaults = dict(self.cluster.broker_default_configs())
        added = change(request, defaults)
        uses: list[BudgetUse] = []
        violations: list[Violation] = []
        additions: list[tuple[BudgetKey, str, float]] = []
        for budget, key in found:
            use = self._usage.get(key)
            if use is None:
                use = self._usage[key] = usage(budget, key, self.cluster)
            mode = Mode.AUDIT if self.dry_run else budget.spec.mode
            for unit, limit in budget.limits():
                adds = added[unit]
                if adds == 0:
                    continue
                before = use.amounts[unit] + self._batch.get((key, unit), 0.0)
                uses.append(_BUDGET_USE(key.name, _whole(before), _whole(adds), limit, unit))
                if adds < 0:
                    continue
                additions.append((key, unit, adds))
                if before + adds > limit:
                    message = _message(
                        key, request.name, unit=unit, before=before, adds=adds, limit=limit, use=use
                    )
                    violations.append(_VIOLATION(key.name, message, mode))
        if not uses:
            return settle(decision)
        all_violations = (*decision.violations, *violations)
        allowed = all(v.mode is Mode.AUDIT for v in all_violations)
        judged = settle(
            _DECISION(
                decision.topic,
                decision.action,
                allowed,
                all_violations,
                decision.mode,
                decision.overrides,
                tuple(uses),
                decision.waived,
            )
        )
        if judged.allowed:
            for key, unit, adds in additions:
                self._batch[(key, unit)] = self._batch.get((key, unit), 0.0) + adds
        return judged


def _message(
    key: BudgetKey,
    topic: str,
    *,
    unit: str,
    before: float,
    adds: float,
    limit: int,
    use: Usage,
) -> str:
    text = _UNIT_TEXT[unit]
    tag = f"[{key.name}] {key.text}"
    if math.isinf(adds):
        return (
            f"{tag} has a budget of {_shown(limit, unit)} of {text}; topic {topic!r} would "
            "make it unlimited (retention.bytes -1, no size limit)"
        )
    if math.isinf(before):
        return (
            f"{tag} already uses unlimited {text} (topic {use.unlimited_by!r} has "
            f"retention.bytes -1) of its {_shown(limit, unit)}; topic {topic!r} would add "
            f"{_shown(adds, unit)}, which no longer fits"
        )
    return (
        f"{tag} uses {_shown(before, unit)} of its {_shown(limit, unit)} {text}; topic "
        f"{topic!r} would add {_shown(adds, unit)} ({_shown(before + adds, unit)} > "
        f"{_shown(limit, unit)})"
    )
