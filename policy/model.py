"""Requests, topic states and decisions: frozen data that round-trips through JSON."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any, NoReturn, TypeVar

from kafka_policy_proxy.policy.usage import TopicUsage

JSON = dict[str, Any]
_T = TypeVar("_T")


class Action(StrEnum):
    """The lifecycle operation a topic request asks for (KIP-201)."""

    CREATE = "create"
    ALTER = "alter"
    DELETE = "delete"
    DELETE_RECORDS = "delete_records"


class AlterKind(StrEnum):
    """Which part of an existing topic an `alter` changes."""

    CONFIGS = "configs"
    PARTITIONS = "partitions"
    REASSIGNMENT = "reassignment"


class ConfigOp(StrEnum):
    """How one config entry in a request changes the topic's configs."""

    SET = "SET"
    DELETE = "DELETE"
    APPEND = "APPEND"
    SUBTRACT = "SUBTRACT"


class ConfigSource(StrEnum):
    """Which Kafka API sent the configs, and so which semantics produced the effective configs."""

    CREATE = "create"  # CreateTopics: requested configs over the broker defaults
    REPLACE = "replace"  # AlterConfigs: a full replacement
    INCREMENTAL = "incremental"  # IncrementalAlterConfigs: ops applied to the current configs
    # A scanned topic's effective configs, all named, with no word on which were set on it
    # (a snapshot without config_sources): what was set or left out cannot be judged.
    SNAPSHOT = "snapshot"


class Fact(StrEnum):
    """A cluster fact the proxy may have to fetch before evaluating a request."""

    TOPIC_STATE = "topic_state"
    BROKER_DEFAULTS = "broker_defaults"
    TOPIC_NAMES = "topic_names"
    BROKER_COUNT = "broker_count"
    TOTAL_PARTITIONS = "total_partitions"
    # Every topic a budget counts: the topic list, and the configs of those in its scope.
    BUDGET_USAGE = "budget_usage"
    # Latest writes and consumer groups of a topic (policy/usage.py): read only for the
    # requests an `in_use` rule selects, and never from a cache.
    TOPIC_USAGE = "topic_usage"


class ConfigMap(dict[str, str | None]):
    """An immutable, hashable config mapping (name -> value, None for a null value)."""

    __slots__ = ("_hash",)

    def __init__(
        self, items: Mapping[str, str | None] | Iterable[tuple[str, str | None]] = ()
    ) -> None:
        super().__init__(items)
        self._hash: int | None = None

    def __hash__(self) -> int:  # type: ignore[override]
        if self._hash is None:
            self._hash = hash(frozenset(self.items()))
        return self._hash

    def __reduce__(self) -> tuple[type[ConfigMap], tuple[dict[str, str | None]]]:
        return (ConfigMap, (dict(self),))

    def __repr__(self) -> str:
        return f"ConfigMap({dict.__repr__(self)})"

    def _immutable(self, *_: object, **__: object) -> NoReturn:
        raise TypeError("ConfigMap is immutable")

    __setitem__ = _immutable
    __delitem__ = _immutable
    __ior__ = _immutable
    clear = _immutable
    pop = _immutable
    popitem = _immutable
    setdefault = _immutable
    update = _immutable

    def merged(self, other: Mapping[str, str | None]) -> ConfigMap:
        """Return a copy with `other`'s entries laid over this map's."""
        merged = dict(self)
        merged.update(other)
        return ConfigMap(merged)


EMPTY_CONFIGS = ConfigMap()


def assembler(cls: type[_T]) -> Callable[..., _T]:
    """A constructor of a frozen, slotted dataclass from every field's value, derived ones too,
    in field order: it runs no `__init__` or `__post_init__` (each frozen field set through
    `object.__setattr__` costs most of a construction), for copies whose derived fields are
    already known. Built once per class."""
    if "__slots__" not in vars(cls):
        raise TypeError(f"{cls.__name__} is not a slotted dataclass")
    setters = [getattr(cls, f.name).__set__ for f in fields(cls)]  # type: ignore[arg-type]
    args = ", ".join(f"v{i}" for i in range(len(setters)))
    body = "".join(f"    s{i}(o, v{i})\n" for i in range(len(setters)))
    namespace: dict[str, Any] = {"new": object.__new__, "cls": cls}
    namespace.update((f"s{i}", setter) for i, setter in enumerate(setters))
    exec(f"def make({args}):\n    o = new(cls)\n{body}    return o\n", namespace)
    make: Callable[..., _T] = namespace["make"]
    return make


Assignment = tuple[tuple[int, tuple[int, ...]], ...]


def freeze_assignment(assignment: Iterable[tuple[int, Iterable[int]]] | None) -> Assignment:
    """Normalise a replica assignment: sorted by partition, replica order kept."""
    if assignment is None:
        return ()
    return tuple(sorted((int(p), tuple(int(b) for b in replicas)) for p, replicas in assignment))


def _assignment_to_json(assignment: Assignment) -> list[list[Any]]:
    return [[partition, list(replicas)] for partition, replicas in assignment]


def _assignment_from_json(data: Any) -> Assignment:
    return freeze_assignment((p, replicas) for p, replicas in data or ())


def _configs_from_json(data: Any) -> ConfigMap:
    return ConfigMap(data or {})


@dataclass(frozen=True, slots=True)
class ConfigChange:
    """One config entry as named in a request."""

    name: str
    op: ConfigOp
    value: str | None

    def to_dict(self) -> JSON:
        """Return a JSON-ready dict."""
        return {"name": self.name, "op": self.op.value, "value": self.value}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ConfigChange:
        """Rebuild from `to_dict()` output."""
        return cls(data["name"], ConfigOp(data["op"]), data["value"])


@dataclass(frozen=True, slots=True)
class TopicState:
    """A topic as it exists in the cluster; `configs` are its effective configs."""

    name: str
    topic_id: str | None = None
    partitions: int = 0
    replication_factor: int = 0
    assignment: Assignment = ()
    configs: ConfigMap = EMPTY_CONFIGS
    internal: bool = False
    marked_for_deletion: bool = False
    # The configs set on the topic itself (not inherited); None where the source did not say.
    overrides: frozenset[str] | None = None

    def to_dict(self) -> JSON:
        """Return a JSON-ready dict (`overrides` only where known)."""
        data: JSON = {
            "name": self.name,
            "topic_id": self.topic_id,
            "partitions": self.partitions,
            "replication_factor": self.replication_factor,
            "assignment": _assignment_to_json(self.assignment),
            "configs": dict(self.configs),
            "internal": self.internal,
            "marked_for_deletion": self.marked_for_deletion,
        }
        if self.overrides is not None:
            data["overrides"] = sorted(self.overrides)
        return data

    def inherits(self, key: str) -> bool:
        """Whether the config's value comes from a default (True where overrides are unknown)."""
        return self.overrides is None or key not in self.overrides

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TopicState:
        """Rebuild from `to_dict()` output."""
        overrides = data.get("overrides")
        return cls(
            name=data["name"],
            topic_id=data.get("topic_id"),
            partitions=data.get("partitions", 0),
            replication_factor=data.get("replication_factor", 0),
            assignment=_assignment_from_json(data.get("assignment")),
            configs=_configs_from_json(data.get("configs")),
            internal=data.get("internal", False),
            marked_for_deletion=data.get("marked_for_deletion", False),
            overrides=None if overrides is None else frozenset(overrides),
        )


@dataclass(frozen=True, slots=True)
class RequestedState:
    """What the topic will look like if the request is allowed.

    `partitions`/`replication_factor` are None when the broker default applies and the
    default was not known; `configs` are the effective configs after the request, as far as
    the broker defaults and current configs given to the builder allow.
    """

    partitions: int | None = None
    replication_factor: int | None = None
    assignment: Assignment = ()
    generated_assignment: bool = True
    configs: ConfigMap = EMPTY_CONFIGS
    changes: tuple[ConfigChange, ...] = ()
    config_source: ConfigSource | None = None
    named: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Derived once: rules ask "was this key named?" for every config they check.
        object.__setattr__(self, "named", frozenset(c.name for c in self.changes))

    def folded(
        self,
        partitions: int | None,
        replication_factor: int | None,
        assignment: Assignment,
        configs: ConfigMap,
    ) -> RequestedState:
        """A copy with the facts folded in; the rest, `named` too, carried over as it is."""
        return _REQUESTED(
            partitions,
            replication_factor,
            assignment,
            self.generated_assignment,
            configs,
            self.changes,
            self.config_source,
            self.named,
        )

    @property
    def named_configs(self) -> ConfigMap:
        """The configs named in the request (name -> value as sent)."""
        return ConfigMap((c.name, c.value) for c in self.changes)

    def to_dict(self) -> JSON:
        """Return a JSON-ready dict."""
        return {
            "partitions": self.partitions,
            "replication_factor": self.replication_factor,
            "assignment": _assignment_to_json(self.assignment),
            "generated_assignment": self.generated_assignment,
            "configs": dict(self.configs),
            "changes": [c.to_dict() for c in self.changes],
            "config_source": None if self.config_source is None else self.config_source.value,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RequestedState:
        """Rebuild from `to_dict()` output."""
        source = data.get("config_source")
        return cls(
            partitions=data.get("partitions"),
            replication_factor=data.get("replication_factor"),
            assignment=_assignment_from_json(data.get("assignment")),
            generated_assignment=data.get("generated_assignment", True),
            configs=_configs_from_json(data.get("configs")),
            changes=tuple(ConfigChange.from_dict(c) for c in data.get("changes") or ()),
            config_source=None if source is None else ConfigSource(source),
        )


@dataclass(frozen=True, slots=True)
class Principal:
    """Who sent the request: the authenticated principal, client id and address."""

    name: str = "User:ANONYMOUS"
    client_id: str = ""
    address: str = ""

    def to_dict(self) -> JSON:
        """Return a JSON-ready dict."""
        return {"name": self.name, "client_id": self.client_id, "address": self.address}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Principal:
        """Rebuild from `to_dict()` output."""
        return cls(
            data.get("name", "User:ANONYMOUS"), data.get("client_id", ""), data.get("address", "")
        )


@dataclass(frozen=True, slots=True)
class TopicRequest:
    """One topic's part of an admin request: who, what, the requested and the current state."""

    topic: str | None
    action: Action
    principal: Principal = field(default_factory=Principal)
    topic_id: str | None = None
    alter_kind: AlterKind | None = None
    validate_only: bool = False
    requested: RequestedState = field(default_factory=RequestedState)
    current: TopicState | None = None
    record_offsets: tuple[tuple[int, int], ...] = ()
    # The in-use facts folded in for an `in_use` rule; recorded as the event's `in_use`.
    usage: TopicUsage | None = None
    # The topic name, else the current state's (deletes by topic id), else "". A field, not a
    # property: every check reads it.
    name: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        name = self.topic if self.topic is not None else self.current.name if self.current else ""
        object.__setattr__(self, "name", name)

    def folded(
        self,
        topic: str | None,
        topic_id: str | None,
        requested: RequestedState,
        current: TopicState | None,
        usage: TopicUsage | None,
    ) -> TopicRequest:
        """A copy with the facts folded in (a delete by topic id learning its name, too)."""
        name = topic if topic is not None else current.name if current else ""
        return _TOPIC_REQUEST(
            topic,
            self.action,
            self.principal,
            topic_id,
            self.alter_kind,
            self.validate_only,
            requested,
            current,
            self.record_offsets,
            usage,
            name,
        )

    def to_dict(self) -> JSON:
        """Return a JSON-ready dict."""
        return {
            "topic": self.topic,
            "topic_id": self.topic_id,
            "action": self.action.value,
            "alter_kind": None if self.alter_kind is None else self.alter_kind.value,
            "principal": self.principal.to_dict(),
            "validate_only": self.validate_only,
            "requested": self.requested.to_dict(),
            "current": None if self.current is None else self.current.to_dict(),
            "record_offsets": [list(po) for po in self.record_offsets],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TopicRequest:
        """Rebuild from `to_dict()` output."""
        kind = data.get("alter_kind")
        current = data.get("current")
        return cls(
            topic=data.get("topic"),
            topic_id=data.get("topic_id"),
            action=Action(data["action"]),
            alter_kind=None if kind is None else AlterKind(kind),
            principal=Principal.from_dict(data.get("principal") or {}),
            validate_only=data.get("validate_only", False),
            requested=RequestedState.from_dict(data.get("requested") or {}),
            current=None if current is None else TopicState.from_dict(current),
            record_offsets=tuple((int(p), int(o)) for p, o in data.get("record_offsets") or ()),
        )


# After the classes: their slots' descriptors are what `assembler` sets.
_REQUESTED = assembler(RequestedState)
_TOPIC_REQUEST = assembler(TopicRequest)


class Mode(StrEnum):
    """Whether a violated rule denies (`enforce`) or is only recorded (`audit`)."""

    ENFORCE = "enforce"
    AUDIT = "audit"


@dataclass(frozen=True, slots=True)
class Violation:
    """One rule a request broke, with the message naming the rule and the value."""

    rule: str
    message: str
    mode: Mode = Mode.ENFORCE

    def to_dict(self) -> JSON:
        """Return a JSON-ready dict."""
        return {"rule": self.rule, "message": self.message, "mode": self.mode.value}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Violation:
        """Rebuild from `to_dict()` output."""
        return cls(data["rule"], data["message"], Mode(data.get("mode", "enforce")))


class OverrideKind(StrEnum):
    """How a rule changed a request instead of denying it."""

    DEFAULT = "default"  # a config the create left out, set to the rule's default
    CAP = "cap"  # a number beyond a bound, set to the bound
    FORCE = "force"  # a config set to the rule's value whatever was asked


@dataclass(frozen=True, slots=True)
class Override:
    """One change a rule made to a request before it was judged and forwarded.

    `target` is `partitions` or a config name; `before` is None where the request left it out.
    """

    rule: str
    kind: OverrideKind
    target: str
    before: str | None
    after: str

    def to_dict(self) -> JSON:
        """Return a JSON-ready dict."""
        return {
            "rule": self.rule,
            "kind": self.kind.value,
            "target": self.target,
            "before": self.before,
            "after": self.after,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Override:
        """Rebuild from `to_dict()` output."""
        return cls(
            data["rule"], OverrideKind(data["kind"]), data["target"], data["before"], data["after"]
        )


@dataclass(frozen=True, slots=True)
class BudgetUse:
    """One budget a request was judged against: usage before it, what it adds, the limit.

    `usage` is None when unlimited (a counted topic keeps records without a size limit);
    `unit` is topics, partitions, replicas or retention_bytes.
    """

    name: str
    usage: int | None
    added: int | None
    limit: int
    unit: str

    def to_dict(self) -> JSON:
        """Return a JSON-ready dict."""
        return {
            "name": self.name,
            "usage": self.usage,
            "added": self.added,
            "limit": self.limit,
            "unit": self.unit,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BudgetUse:
        """Rebuild from `to_dict()` output."""
        return cls(data["name"], data["usage"], data["added"], data["limit"], data["unit"])


@dataclass(frozen=True, slots=True)
class Waiver:
    """One violation an exception in force waived: the rule, the exception and its terms."""

    rule: str
    exception: str
    ticket: str | None
    expires: str  # RFC 3339, UTC, with microseconds as the record's `time`
    message: str  # the violation's message, as it would have denied

    def to_dict(self) -> JSON:
        """Return a JSON-ready dict."""
        return {
            "rule": self.rule,
            "exception": self.exception,
            "ticket": self.ticket,
            "expires": self.expires,
            "message": self.message,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Waiver:
        """Rebuild from `to_dict()` output."""
        return cls(
            data["rule"], data["exception"], data.get("ticket"), data["expires"], data["message"]
        )


@dataclass(frozen=True, slots=True)
class Decision:
    """The verdict for one topic: allowed or denied, and every violated rule in rule order.

    `mode` is `audit` when the whole policy runs as a dry run. `allowed` is False exactly when
    an `enforce` violation is present; audit violations only record what would have been denied.
    """

    topic: str
    action: Action
    allowed: bool
    violations: tuple[Violation, ...] = ()
    mode: Mode = Mode.ENFORCE
    # What the policy changed in the request before judging it (an allowed topic goes to the
    # broker rewritten so).
    overrides: tuple[Override, ...] = ()
    # The budgets the request was judged against (policy/budgets.py).
    budgets: tuple[BudgetUse, ...] = ()
    # Enforced violations an exception in force waived (no longer in `violations`).
    waived: tuple[Waiver, ...] = ()

    @property
    def message(self) -> str:
        """The enforced violations' messages joined for a Kafka error message."""
        return "; ".join(v.message for v in self.violations if v.mode is Mode.ENFORCE)

    def to_dict(self) -> JSON:
        """Return a JSON-ready dict (`budgets` and `waived` only when there are some)."""
        data: JSON = {
            "topic": self.topic,
            "action": self.action.value,
            "allowed": self.allowed,
            "violations": [v.to_dict() for v in self.violations],
            "mode": self.mode.value,
            "overrides": [o.to_dict() for o in self.overrides],
        }
        if self.budgets:
            data["budgets"] = [b.to_dict() for b in self.budgets]
        if self.waived:
            data["waived"] = [w.to_dict() for w in self.waived]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Decision:
        """Rebuild from `to_dict()` output."""
        return cls(
            topic=data["topic"],
            action=Action(data["action"]),
            allowed=data["allowed"],
            violations=tuple(Violation.from_dict(v) for v in data.get("violations") or ()),
            mode=Mode(data.get("mode", "enforce")),
            overrides=tuple(Override.from_dict(o) for o in data.get("overrides") or ()),
            budgets=tuple(BudgetUse.from_dict(b) for b in data.get("budgets") or ()),
            waived=tuple(Waiver.from_dict(w) for w in data.get("waived") or ()),
        )
