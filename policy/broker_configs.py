"""Config changes that are not a topic's: brokers, the cluster default, loggers, groups, metrics.

Denied by default (`alter_broker_config`): a change is allowed only when, for every key it
touches, a `broker_configs` rule names the principal, the resource kind and the key, and the
new value is within that rule's bounds. A new value for a topic-config default
(`log.retention.ms` on the cluster default or on one broker) is also checked against every
existing topic that inherits it: if it would put one outside the topic rules, the change is
denied, naming the first few such topics.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import Any

from kafka_policy_proxy.policy.checks import value_verdict
from kafka_policy_proxy.policy.cluster import ClusterState
from kafka_policy_proxy.policy.config_synonyms import BROKER_TO_TOPIC
from kafka_policy_proxy.policy.configs import config_type, split_list
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.model import (
    JSON,
    Action,
    AlterKind,
    ConfigChange,
    ConfigMap,
    ConfigOp,
    ConfigSource,
    Mode,
    Principal,
    RequestedState,
    TopicRequest,
    TopicState,
    Violation,
)
from kafka_policy_proxy.policy.rules import BrokerConfigRule, PolicyDocument

BROKER_CONFIGS_RULE = "broker-configs"
INHERITED_RULE = "inherited-defaults"
# How many of the topics a new default would put outside the rules a message names.
NAMED_TOPICS = 3


class ConfigResource(StrEnum):
    """The kind of config resource a change is about (never a topic)."""

    CLUSTER_DEFAULT = "cluster_default"
    BROKER = "broker"
    BROKER_LOGGER = "broker_logger"
    GROUP = "group"
    CLIENT_METRICS = "client_metrics"


# Where a topic-config default lives: a new value there reaches the topics that inherit it.
TOPIC_DEFAULT_SCOPES = frozenset({ConfigResource.CLUSTER_DEFAULT, ConfigResource.BROKER})


@dataclass(frozen=True, slots=True)
class BrokerConfigRequest:
    """One config resource of an AlterConfigs or IncrementalAlterConfigs request.

    `name` is the broker id, group id or subscription name ("" for the cluster default).
    `replace` is True for the legacy AlterConfigs, which removes every dynamic key it does
    not name.
    """

    resource: ConfigResource
    name: str
    principal: Principal
    changes: tuple[ConfigChange, ...]
    replace: bool = False
    validate_only: bool = False

    @property
    def label(self) -> str:
        """How messages name the resource: "the cluster default", "broker 1", "group g"."""
        if self.resource is ConfigResource.CLUSTER_DEFAULT:
            return "the cluster default"
        return f"{self.resource.value.replace('_', ' ')} {self.name!r}"

    def to_dict(self) -> JSON:
        """Return a JSON-ready dict (a decision record's `request`)."""
        return {
            "config_resource": self.resource.value,
            "name": self.name,
            "principal": self.principal.to_dict(),
            "changes": [c.to_dict() for c in self.changes],
            "replace": self.replace,
            "validate_only": self.validate_only,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BrokerConfigRequest:
        """Rebuild from `to_dict()` output (extra keys, such as `rules`, are ignored)."""
        return cls(
            resource=ConfigResource(data["config_resource"]),
            name=data.get("name", ""),
            principal=Principal.from_dict(data.get("principal") or {}),
            changes=tuple(ConfigChange.from_dict(c) for c in data.get("changes") or ()),
            replace=data.get("replace", False),
            validate_only=data.get("validate_only", False),
        )


@dataclass(frozen=True, slots=True)
class BrokerConfigDecision:
    """The verdict for one config resource; `rules` are the rules that granted its keys and
    `outside` the inheriting topics the change would put outside the topic rules."""

    request: BrokerConfigRequest
    allowed: bool
    violations: tuple[Violation, ...] = ()
    mode: Mode = Mode.ENFORCE
    rules: tuple[str, ...] = ()
    outside: tuple[str, ...] = ()

    @property
    def message(self) -> str:
        """The enforced violations' messages joined for a Kafka error message."""
        return "; ".join(v.message for v in self.violations if v.mode is Mode.ENFORCE)


@dataclass(frozen=True, slots=True)
class Grant:
    """The rule checks of one request, which need no cluster facts."""

    violations: tuple[Violation, ...]
    rules: tuple[str, ...]


def grant(document: PolicyDocument, request: BrokerConfigRequest) -> Grant:
    """Check every key the request touches against the `broker_configs` rules."""
    mode = Mode.AUDIT if document.dry_run else Mode.ENFORCE
    selected = [r for r in document.broker_configs if _selects(r, request)]
    violations: list[Violation] = []
    granted: list[str] = []
    if request.replace and not any("*" in r.keys for r in selected):
        message = (
            f"[{BROKER_CONFIGS_RULE}] the legacy AlterConfigs replaces every dynamic config of "
            f"{request.label}; only a rule granting all keys ('*') to {request.principal.name} "
            "allows it (IncrementalAlterConfigs changes single keys)"
        )
        violations.append(Violation(BROKER_CONFIGS_RULE, message, mode))
    for change in request.changes:
        problems = []
        for rule in selected:
            if not any(fnmatchcase(change.name, key) for key in rule.keys):
                continue
            problem = _out_of_bounds(rule, change)
            if problem is None:
                if rule.name not in granted:
                    granted.append(rule.name)
                break
            problems.append(Violation(rule.name, f"[{rule.name}] {problem}", mode))
        else:
            if not problems:
                message = (
                    f"[{BROKER_CONFIGS_RULE}] {request.principal.name} may not change "
                    f"{change.name} on {request.label}: no broker_configs rule of the policy "
                    "allows it"
                )
                problems.append(Violation(BROKER_CONFIGS_RULE, message, mode))
            violations.extend(problems)
    return Grant(tuple(violations), tuple(granted))


def _selects(rule: BrokerConfigRule, request: BrokerConfigRequest) -> bool:
    name = request.principal.name
    return request.resource.value in rule.resources and any(
        fnmatchcase(name, p) for p in rule.principals
    )


def _out_of_bounds(rule: BrokerConfigRule, change: ConfigChange) -> str | None:
    """Why the rule's bounds refuse the change, or None."""
    constraint = rule.configs.get(change.name)
    if constraint is None:
        return None
    typed_as = _typed_as(change.name)
    verdict = value_verdict(typed_as, config_type(typed_as, constraint.type), constraint)
    if verdict is None:
        return None
    if change.op is ConfigOp.DELETE or change.value is None:
        return (
            f"{change.name} is bounded, and removing it falls back to a value the proxy cannot "
            "check; set it within the bounds instead"
        )
    if change.op is ConfigOp.SUBTRACT:
        return None  # removing items cannot add a value the bounds refuse
    values = split_list(change.value) if change.op is ConfigOp.APPEND else [change.value]
    for value in values:
        tail = verdict(value)
        if tail is not None:
            return f"{change.name} would be{tail}"
    return None


def _typed_as(broker_key: str) -> str:
    """The topic config a broker key's value is read as, where the units agree; else itself."""
    topic_key, factor = BROKER_TO_TOPIC.get(broker_key, (broker_key, 1))
    return topic_key if factor == 1 else broker_key


def topic_defaults(request: BrokerConfigRequest) -> tuple[ConfigChange, ...]:
    """The changes that set or remove a topic-config default (keyed by topic config name)."""
    if request.resource not in TOPIC_DEFAULT_SCOPES:
        return ()
    found = []
    for change in request.changes:
        mapped = BROKER_TO_TOPIC.get(change.name)
        if mapped is None:
            continue
        topic_key, factor = mapped
        value = change.value
        if value is not None and factor != 1 and change.op is ConfigOp.SET:
            # A value that is not a number is refused by the broker; the rules see it as sent.
            with contextlib.suppress(ValueError):
                value = str(int(value) * factor)
        found.append(ConfigChange(topic_key, change.op, value))
    return tuple(found)


def reaches_topics(document: PolicyDocument, request: BrokerConfigRequest) -> bool:
    """Whether the request changes a topic-config default that the topic rules check."""
    return any(_checked_by_topic_rules(document, c.name) for c in topic_defaults(request))


def inherited(
    policy: CompiledPolicy, request: BrokerConfigRequest, cluster: ClusterState
) -> tuple[list[Violation], tuple[str, ...]]:
    """The violations of the topic rules a new default brings to the topics that inherit it.

    Conservative where Kafka's precedence is finer: a broker's own value is checked against
    every topic (not only those with replicas there), and a lower-precedence synonym
    (`log.retention.hours` while `log.retention.ms` is set) as if it took effect.
    """
    changes = topic_defaults(request)
    if not changes:
        return [], ()
    mode = Mode.AUDIT if policy.dry_run else Mode.ENFORCE
    violations = []
    settable = []
    for change in changes:
        if change.op is ConfigOp.DELETE or change.value is None:
            if _checked_by_topic_rules(policy.document, change.name):
                message = (
                    f"[{INHERITED_RULE}] removing the {change.name} default on {request.label} "
                    "falls back to a value the proxy cannot check against the topic rules that "
                    f"bound {change.name}; set it to a value instead"
                )
                violations.append(Violation(INHERITED_RULE, message, mode))
        else:
            settable.append(change)
    defaults = cluster.broker_default_configs()
    # Only the checks of these keys can change a topic's verdict: skip the topics otherwise.
    new_defaults = {
        key: value
        for key, value in _applied(settable, defaults).items()
        if _checked_by_topic_rules(policy.document, key)
    }
    outside: list[tuple[str, Violation]] = []
    for name in sorted(cluster.topic_names(include_internal=True)):
        state = cluster.topic(name)
        if state is None:
            continue
        changed = {
            key: value
            for key, value in new_defaults.items()
            if state.inherits(key) and state.configs.get(key) != value
        }
        if changed:
            brought = _brought(policy, request.principal, state, changed, cluster)
            if brought is not None:
                outside.append((name, brought))
    if outside:
        violations.append(_outside_violation(request, outside, mode))
    return violations, tuple(name for name, _ in outside)


def _applied(changes: Iterable[ConfigChange], defaults: Mapping[str, str | None]) -> ConfigMap:
    """The new value of each topic-config default the changes set (APPEND/SUBTRACT on lists)."""
    new: dict[str, str | None] = {}
    for change in changes:
        if change.op is ConfigOp.SET:
            new[change.name] = change.value
            continue
        items = split_list(new.get(change.name, defaults.get(change.name)))
        given = split_list(change.value)
        if change.op is ConfigOp.APPEND:
            items += [item for item in given if item not in items]
        else:
            items = [item for item in items if item not in given]
        new[change.name] = ",".join(items)
    return ConfigMap(new)


def _brought(
    policy: CompiledPolicy,
    principal: Principal,
    state: TopicState,
    changed: Mapping[str, str | None],
    cluster: ClusterState,
) -> Violation | None:
    """The first violation the new values add to the topic, judged as an alter of its configs."""
    after = policy.evaluate(_as_alter(state, state.configs.merged(changed), principal), cluster)
    if not after.violations:
        return None
    # Only what the new values add: a topic already outside a rule does not block the change.
    before = policy.evaluate(_as_alter(state, state.configs, principal), cluster)
    already = {v.rule for v in before.violations}
    added = [v for v in after.violations if v.rule not in already]
    enforced = [v for v in added if v.mode is Mode.ENFORCE]
    first = enforced or added
    return first[0] if first else None


def _as_alter(state: TopicState, configs: ConfigMap, principal: Principal) -> TopicRequest:
    """The topic as if its effective configs became `configs` without the topic naming them."""
    requested = RequestedState(
        partitions=state.partitions,
        replication_factor=state.replication_factor,
        assignment=state.assignment,
        configs=configs,
        config_source=ConfigSource.INCREMENTAL,
    )
    return TopicRequest(
        topic=state.name,
        action=Action.ALTER,
        principal=principal,
        topic_id=state.topic_id,
        alter_kind=AlterKind.CONFIGS,
        requested=requested,
        current=state,
    )


_OP_SIGNS = {ConfigOp.SET: "=", ConfigOp.APPEND: "+=", ConfigOp.SUBTRACT: "-="}


def _outside_violation(
    request: BrokerConfigRequest, outside: Sequence[tuple[str, Violation]], mode: Mode
) -> Violation:
    setting = ", ".join(
        f"{c.name}{_OP_SIGNS[c.op]}{c.value}"
        for c in request.changes
        if c.name in BROKER_TO_TOPIC and c.op in _OP_SIGNS and c.value is not None
    )
    named = "; ".join(f"{name} ({violation.message})" for name, violation in outside[:NAMED_TOPICS])
    more = len(outside) - NAMED_TOPICS
    tail = f"; and {more} more" if more > 0 else ""
    count = "1 topic" if len(outside) == 1 else f"{len(outside)} topics"
    all_audit = all(v.mode is Mode.AUDIT for _, v in outside)
    message = (
        f"[{INHERITED_RULE}] the new default {setting} on {request.label} would put {count} "
        f"that inherit it outside the topic rules: {named}{tail}"
    )
    return Violation(INHERITED_RULE, message, Mode.AUDIT if all_audit else mode)


def _checked_by_topic_rules(document: PolicyDocument, topic_key: str) -> bool:
    """Whether a topic rule bounds the key, or a plugin could read it on a config alter."""
    if any(p.match.actions is None or _alters_configs(p.match.actions) for p in document.plugins):
        return True
    return any(topic_key in rule.configs for rule in document.rules)


def _alters_configs(actions: Sequence[str]) -> bool:
    return "alter" in actions or "alter:configs" in actions


def decide(
    policy: CompiledPolicy,
    request: BrokerConfigRequest,
    granted: Grant,
    cluster: ClusterState | None,
) -> BrokerConfigDecision:
    """The decision from the grant and, where the request sets topic defaults, the cluster."""
    violations = list(granted.violations)
    outside: tuple[str, ...] = ()
    if cluster is not None:
        brought, outside = inherited(policy, request, cluster)
        violations.extend(brought)
    mode = Mode.AUDIT if policy.dry_run else Mode.ENFORCE
    allowed = all(v.mode is Mode.AUDIT for v in violations)
    return BrokerConfigDecision(request, allowed, tuple(violations), mode, granted.rules, outside)
