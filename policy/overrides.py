"""Override actions: rules that change a create or a config change instead of denying it.

A config constraint may give a `default` (set when a create leaves the config out), `force`
(set on every create and on every change that names the config) or `cap` (a value beyond its
min/max becomes the bound); a partitions constraint may `cap` a create's count. A legacy
AlterConfigs replaces every config, so one that leaves a config out counts as a create does:
`default` and `force` add it back. Overrides run
before the rules are checked, in rule order, so the rules judge the request as it will reach
the broker. Only enforcing rules override (an audit-mode rule only records), and never on a
delete, a partition increase or a reassignment.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from kafka_policy_proxy.policy.checks import ALTER_CONFIGS, CREATE, ActionKey
from kafka_policy_proxy.policy.configs import ConfigType, config_type, parse_bound, parse_value
from kafka_policy_proxy.policy.model import (
    Action,
    AlterKind,
    ConfigChange,
    ConfigMap,
    ConfigOp,
    ConfigSource,
    Mode,
    Override,
    OverrideKind,
    TopicRequest,
)
from kafka_policy_proxy.policy.rules import ConfigConstraint, PolicyDocument, Rule

NUMERIC = (ConfigType.NUMBER, ConfigType.DURATION, ConfigType.SIZE)
PARTITIONS = "partitions"

# Whether a rule's selector takes a request: (request, topic name) -> bool.
Selects = Callable[[TopicRequest, str], bool]


@dataclass(frozen=True, slots=True)
class ConfigOverride:
    """What one rule does to one config key."""

    key: str
    default: str | None
    force: str | None
    low: float | None  # the bounds a cap enforces, in the config's unit
    high: float | None


@dataclass(frozen=True, slots=True)
class RuleOverrides:
    """One enforcing rule's overrides and the requests it selects."""

    rule: str
    selects: Selects
    internal: bool
    creates: bool
    config_changes: bool
    partitions: tuple[int | None, int | None] | None  # (min, max) a create is capped to
    configs: tuple[ConfigOverride, ...]


def has_overrides(rule: Rule) -> bool:
    """Whether the rule changes requests rather than only denying them."""
    partitions = rule.partitions is not None and rule.partitions.cap
    return partitions or any(_overrides(c) for c in rule.configs.values())


def _overrides(constraint: ConfigConstraint) -> bool:
    return constraint.cap or constraint.default is not None or constraint.force is not None


def _text(value: str | int | None) -> str | None:
    return None if value is None else str(value)


def compile_overrides(
    document: PolicyDocument,
    selects: Callable[[Rule], Selects],
    keys: Callable[[Rule], frozenset[ActionKey]],
) -> tuple[RuleOverrides, ...]:
    """The enforcing rules with overrides, in rule order; none under dry_run."""
    if document.dry_run:
        return ()
    found = []
    for rule in document.rules:
        if rule.mode is not Mode.ENFORCE or not has_overrides(rule):
            continue
        configs = []
        for key, constraint in rule.configs.items():
            if not _overrides(constraint):
                continue
            kind = config_type(key, constraint.type)
            capped = constraint.cap and kind in NUMERIC
            configs.append(
                ConfigOverride(
                    key,
                    _text(constraint.default),
                    _text(constraint.force),
                    _bound(constraint.min, kind) if capped else None,
                    _bound(constraint.max, kind) if capped else None,
                )
            )
        bounds = rule.partitions
        wanted = keys(rule)
        found.append(
            RuleOverrides(
                rule=rule.name,
                selects=selects(rule),
                internal=rule.match.internal,
                creates=CREATE in wanted,
                config_changes=ALTER_CONFIGS in wanted,
                partitions=(bounds.min, bounds.max) if bounds is not None and bounds.cap else None,
                configs=tuple(configs),
            )
        )
    return tuple(found)


def _bound(value: int | float | str | None, kind: ConfigType) -> float | None:
    return None if value is None else parse_bound(value, kind)


def apply_overrides(
    rules: tuple[RuleOverrides, ...], request: TopicRequest, internal: bool
) -> tuple[TopicRequest, tuple[Override, ...]]:
    """The request as the overriding rules leave it, and what each of them changed."""
    create = request.action is Action.CREATE
    if not create and request.alter_kind is not AlterKind.CONFIGS:
        return request, ()
    name = request.name
    requested = request.requested
    partitions = requested.partitions
    changes = list(requested.changes)
    configs = dict(requested.configs)
    done: list[Override] = []
    for spec in rules:
        if not (spec.creates if create else spec.config_changes):
            continue
        if (internal and not spec.internal) or not spec.selects(request, name):
            continue
        if create and spec.partitions is not None and requested.generated_assignment:
            low, high = spec.partitions
            capped = _clamp(partitions, low, high)
            if partitions is not None and capped != partitions:
                done.append(
                    Override(spec.rule, OverrideKind.CAP, PARTITIONS, str(partitions), str(capped))
                )
                partitions = capped
        # A full replacement (AlterConfigs) leaves out what it resets, as a create does.
        complete = create or requested.config_source is ConfigSource.REPLACE
        for config in spec.configs:
            found = _override_config(config, complete, changes, configs)
            if found is not None:
                done.append(dataclasses.replace(found, rule=spec.rule))
    if not done:
        return request, ()
    rewritten = dataclasses.replace(
        requested, partitions=partitions, changes=tuple(changes), configs=ConfigMap(configs)
    )
    return dataclasses.replace(request, requested=rewritten), tuple(done)


def _clamp(value: int | None, low: int | None, high: int | None) -> int | None:
    if value is None:
        return None
    if high is not None and value > high:
        return high
    if low is not None and value < low:
        return low
    return value


def _override_config(
    spec: ConfigOverride,
    complete: bool,
    changes: list[ConfigChange],
    configs: dict[str, str | None],
) -> Override | None:
    """Apply one key's override to the request's changes (and effective configs) in place;
    what it changed, with the rule left for the caller to fill in."""
    key = spec.key
    named = [i for i, c in enumerate(changes) if c.name == key]
    settable = [i for i in named if changes[i].op is ConfigOp.SET and changes[i].value is not None]
    if named and not settable:
        return None  # a removal or a list edit: nothing a value override can mean
    before = changes[settable[-1]].value if settable else None
    after, kind = before, None
    if spec.force is not None and (complete or named) and before != spec.force:
        after, kind = spec.force, OverrideKind.FORCE
    elif spec.default is not None and complete and not named:
        after, kind = spec.default, OverrideKind.DEFAULT
    elif before is not None and (spec.low is not None or spec.high is not None):
        value = parse_value(key, before)  # -1 retention (unlimited) reads as infinite
        if value is not None:
            bounded = value
            if spec.high is not None and value > spec.high:
                bounded = spec.high
            elif spec.low is not None and value < spec.low:
                bounded = spec.low
            if bounded != value:
                after, kind = _number(bounded), OverrideKind.CAP
    if kind is None or after is None:
        return None
    if settable:
        for i in settable:
            changes[i] = ConfigChange(key, ConfigOp.SET, after)
    else:
        changes.append(ConfigChange(key, ConfigOp.SET, after))
    configs[key] = after
    return Override("", kind, key, before, after)


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else str(value)


def describe(topic: str, override: Override) -> str:
    """What an override changed, in words (without the `[rule]` prefix)."""
    target, before, after = override.target, override.before, override.after
    if override.kind is OverrideKind.DEFAULT:
        return f"topic {topic!r}: {target} is not set; the policy sets it to {after}"
    if override.kind is OverrideKind.CAP:
        return f"topic {topic!r}: {target} is {before}; the policy caps it at {after}"
    shown = "not set" if before is None else before
    return f"topic {topic!r}: {target} is {shown}; the policy forces {after}"
