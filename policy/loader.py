"""Policy text (YAML) or a mapping -> a validated, compiled policy; errors name the path."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path as FilePath
from typing import Any

import yaml
from pydantic import ValidationError

from kafka_policy_proxy.policy.configs import (
    ConfigType,
    config_type,
    parse_bound,
    parse_value,
    split_list,
)
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.exceptions import exception_problems
from kafka_policy_proxy.policy.model import Mode
from kafka_policy_proxy.policy.plugins import PluginLoadError
from kafka_policy_proxy.policy.revision import policy_revision
from kafka_policy_proxy.policy.rules import ConfigConstraint, PolicyDocument, Rule

Path = tuple[str | int, ...]
_BARE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMERIC_KINDS = (ConfigType.NUMBER, ConfigType.DURATION, ConfigType.SIZE)
_CONSTRAINT_FIELDS = (
    "name_pattern",
    "name_collision",
    "partitions",
    "replication",
    "configs",
    "deny",
    "cluster",
    "in_use",
)


@dataclass(frozen=True, slots=True)
class Problem:
    """One reason a policy was refused, at a path such as rules[2].configs."retention.ms".max."""

    path: Path
    reason: str
    line: int | None = None

    @property
    def where(self) -> str:
        """The path rendered for people."""
        return format_path(self.path)


class PolicyError(Exception):
    """The policy was refused; `problems` lists every path and reason."""

    def __init__(self, source: str, problems: Sequence[Problem], what: str = "policy") -> None:
        self.source = source
        self.problems = tuple(problems)
        lines = [f"invalid {what} {source}:"]
        for p in self.problems:
            at = f"line {p.line}: " if p.line is not None else ""
            lines.append(f"  {at}{p.where}: {p.reason}")
        super().__init__("\n".join(lines))


def format_path(path: Path) -> str:
    """Render a path as people read it: rules[2].configs."retention.ms".max."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            text = part if _BARE_KEY.fullmatch(part) else f'"{part}"'
            out += f".{text}" if out else text
    return out or "(top level)"


def parse_document(
    source: str | Mapping[str, Any], name: str = "<policy>", *, now: datetime | None = None
) -> PolicyDocument:
    """Parse and validate a policy (YAML text or a mapping) without compiling it.

    `now` is the instant it is loaded or checked: exceptions expiring more than
    `exception_policy.max_days` after it are refused (not checked when None).
    """
    data, node = parse_source(source, name)
    try:
        document = PolicyDocument.model_validate(data)
    except ValidationError as exc:
        raise PolicyError(name, validation_problems(exc, node)) from None
    problems = _semantic_problems(document) + exception_problems(document, now)
    if problems:
        raise PolicyError(name, [Problem(p, r, line_of(node, p)) for p, r in problems])
    return document


def load_policy(
    source: str | Mapping[str, Any],
    name: str = "<policy>",
    *,
    load_plugins: bool = True,
    base_dir: FilePath | None = None,
    now: datetime | None = None,
) -> CompiledPolicy:
    """Validate and compile a policy; plugins and Java policies are loaded unless told not to.

    `base_dir` is the policy file's folder, where relative java_policy jar paths are read;
    `now` the loading instant that `exception_policy.max_days` counts from.
    """
    document = parse_document(source, name, now=now)
    try:
        revision = policy_revision(source) if isinstance(source, str) else None
        return CompiledPolicy(
            document, load_plugins=load_plugins, revision=revision, base_dir=base_dir
        )
    except PluginLoadError as exc:
        index = exc.index if exc.index is not None else 0
        where = exc.path or ("plugins", index, "class")
        raise PolicyError(name, [Problem(where, str(exc))]) from None


def policy_json_schema() -> dict[str, Any]:
    """The JSON Schema of a policy file, for editors."""
    schema = PolicyDocument.model_json_schema(by_alias=True)
    schema["title"] = "kafka-policy-proxy policy"
    return schema


def parse_source(
    source: str | Mapping[str, Any], name: str, what: str = "policy"
) -> tuple[Any, yaml.Node | None]:
    """Parse YAML text (or take a mapping); also return the YAML node tree for line numbers."""
    if not isinstance(source, str):
        return dict(source), None
    try:
        node = yaml.compose(source, Loader=yaml.SafeLoader)
        data = yaml.safe_load(source)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = None if mark is None else mark.line + 1
        raise PolicyError(name, [Problem((), f"not valid YAML: {exc}", line)], what) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PolicyError(name, [Problem((), "the top level must be a mapping")], what)
    return data, node


def validation_problems(exc: ValidationError, node: yaml.Node | None) -> list[Problem]:
    """Turn pydantic's errors into Problems with paths and YAML line numbers."""
    return [_problem(error, node) for error in exc.errors()]


def _problem(error: Any, node: yaml.Node | None) -> Problem:
    path: Path = tuple(error["loc"])
    if error["type"] == "extra_forbidden":
        reason = "unknown key"
    elif error["type"] == "missing":
        reason = "required key is missing"
    else:
        reason = str(error["msg"]).removeprefix("Value error, ")
    return Problem(path, reason, line_of(node, path))


def line_of(node: yaml.Node | None, path: Path) -> int | None:
    """The 1-based line of the YAML node at `path` (or of its nearest parent)."""
    if node is None:
        return None
    for part in path:
        child = None
        if isinstance(node, yaml.MappingNode):
            child = next((v for k, v in node.value if k.value == part), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            child = node.value[part] if 0 <= part < len(node.value) else None
        if child is None:
            break
        node = child
    return int(node.start_mark.line) + 1


def _semantic_problems(document: PolicyDocument) -> list[tuple[Path, str]]:
    """What pydantic cannot see: duplicate names, typed config bounds, empty rules and
    policies that enforce nothing."""
    problems: list[tuple[Path, str]] = []
    seen: dict[str, Path] = {}
    named: list[tuple[Path, str]] = [(("rules", i), r.name) for i, r in enumerate(document.rules)]
    named += [(("plugins", i), p.name) for i, p in enumerate(document.plugins)]
    named += [(("budgets", i), b.name) for i, b in enumerate(document.budgets)]
    for where, rule_name in named:
        if rule_name in seen:
            problems.append(
                (
                    (*where, "name"),
                    f"duplicate name {rule_name!r} (also {format_path(seen[rule_name])})",
                )
            )
        else:
            seen[rule_name] = where
    for index, rule in enumerate(document.rules):
        problems += _rule_problems(("rules", index), rule)
    return problems + _enforcement_problems(document)


def _enforcement_problems(document: PolicyDocument) -> list[tuple[Path, str]]:
    """A policy that denies nothing must say so: a typo must not disarm the proxy."""
    enforcing: list[Path] = []
    if not document.dry_run:
        enforcing += [("rules", i) for i, r in enumerate(document.rules) if r.mode is Mode.ENFORCE]
        enforcing += [
            ("plugins", i) for i, p in enumerate(document.plugins) if p.mode is Mode.ENFORCE
        ]
        enforcing += [
            ("budgets", i) for i, b in enumerate(document.budgets) if b.mode is Mode.ENFORCE
        ]
    if document.enforce == "nothing" and enforcing:
        return [
            (
                ("enforce",),
                f"`enforce: nothing` says this policy denies nothing, but "
                f"{format_path(enforcing[0])} enforces; remove the key",
            )
        ]
    if document.enforce is None and not enforcing:
        if document.dry_run:
            why = "dry_run: true puts every rule in audit mode"
        elif document.rules or document.plugins or document.budgets:
            why = "every rule and plugin is in audit mode"
        else:
            why = "it has no rules and no plugins"
        return [
            (
                (),
                f"this policy enforces nothing ({why}); if that is intended, "
                "set `enforce: nothing` at the top level",
            )
        ]
    return []


def _rule_problems(at: Path, rule: Rule) -> list[tuple[Path, str]]:
    given = [f for f in _CONSTRAINT_FIELDS if f in rule.model_fields_set and getattr(rule, f)]
    for kind in ("streams", "java_policy"):
        if getattr(rule, kind) is None:
            continue
        others = given + [k for k in ("streams",) if k != kind and rule.streams is not None]
        if others:
            what = "a streams rule" if kind == "streams" else "a java_policy rule"
            return [((*at, kind), f"{what} takes no other constraints ({', '.join(others)})")]
        return _java_problems(at, rule) if kind == "java_policy" else []
    if not given:
        return [(at, "the rule has no constraints (and is not a streams or java_policy rule)")]
    problems: list[tuple[Path, str]] = []
    for key, constraint in rule.configs.items():
        where: Path = (*at, "configs", key)
        kind = config_type(key, constraint.type)
        if constraint.required and constraint.forbidden:
            problems.append((where, "a config cannot be both required and forbidden"))
        bounds: dict[str, float] = {}
        for field in ("min", "max"):
            raw = getattr(constraint, field)
            if raw is None:
                continue
            if kind not in _NUMERIC_KINDS:
                problems.append(
                    (
                        (*where, field),
                        f"{key} is a {kind.value} config; min/max need a number, "
                        "duration or size (set `type` for configs Kafka does not define)",
                    )
                )
                continue
            try:
                bounds[field] = parse_bound(raw, kind)
            except ValueError as exc:
                problems.append(((*where, field), str(exc)))
        if "min" in bounds and "max" in bounds and bounds["min"] > bounds["max"]:
            problems.append(
                ((*where, "max"), f"max ({constraint.max}) is less than min ({constraint.min})")
            )
        problems += _override_problems(where, key, kind, constraint, bounds)
    bounds_given = rule.partitions is not None and (
        rule.partitions.min is not None or rule.partitions.max is not None
    )
    if rule.partitions is not None and rule.partitions.cap and not bounds_given:
        problems.append(((*at, "partitions", "cap"), "cap needs min or max"))
    return problems


def _override_problems(
    where: Path, key: str, kind: ConfigType, constraint: ConfigConstraint, bounds: dict[str, float]
) -> list[tuple[Path, str]]:
    """An override must be possible, and what it sets must pass the constraint it sits in."""
    problems: list[tuple[Path, str]] = []
    if constraint.cap:
        if kind not in _NUMERIC_KINDS:
            problems.append(
                ((*where, "cap"), f"cap needs a number, duration or size; {key} is a {kind.value}")
            )
        elif constraint.min is None and constraint.max is None:
            problems.append(((*where, "cap"), "cap needs min or max"))
    if constraint.default is not None and constraint.force is not None:
        problems.append(((*where, "force"), "give default or force, not both"))
    for field in ("default", "force"):
        value = getattr(constraint, field)
        if value is None:
            continue
        if constraint.forbidden:
            problems.append(((*where, field), f"{key} is forbidden, so nothing may set it"))
            continue
        reason = _unacceptable(key, kind, str(value), constraint, bounds)
        if reason is not None:
            problems.append(((*where, field), f"{value!r} {reason}"))
    return problems


def _unacceptable(
    key: str, kind: ConfigType, value: str, constraint: ConfigConstraint, bounds: dict[str, float]
) -> str | None:
    """Why the rule itself would deny `value` for `key`, or None."""
    if kind in _NUMERIC_KINDS:
        number = parse_value(key, value)
        if number is None:
            return f"is not a number ({key} is a {kind.value} config, in its base unit)"
        if ("min" in bounds and number < bounds["min"]) or (
            "max" in bounds and number > bounds["max"]
        ):
            return "is outside this constraint's min/max"
    if constraint.values is not None:
        items = split_list(value) if kind is ConfigType.LIST else [value]
        if any(item not in constraint.values for item in items):
            return "is not one of this constraint's values"
    if constraint.pattern is not None and re.fullmatch(constraint.pattern, value) is None:
        return "does not match this constraint's pattern"
    return None


def _java_problems(at: Path, rule: Rule) -> list[tuple[Path, str]]:
    """A Java policy is only ever called for creates and config changes, as on the broker."""
    actions = rule.match.actions
    if actions is None:
        return []
    usable = {"create", "alter", "alter:configs"}
    if not usable & set(actions):
        return [
            (
                (*at, "match", "actions"),
                "a java_policy rule is called for create and alter:configs only; "
                f"{', '.join(actions)} would never reach it",
            )
        ]
    return []
