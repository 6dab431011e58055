"""The compiled policy: per-action plans of selectors and checks, evaluated synchronously."""

from __future__ import annotations

import fnmatch
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from kafka_policy_proxy.policy.budgets import compile_budgets
from kafka_policy_proxy.policy.checks import (
    ACTION_KEYS,
    ALL_KEYS,
    ActionKey,
    Check,
    CheckFn,
    Verbatim,
    compile_rule,
)
from kafka_policy_proxy.policy.cluster import INTERNAL_TOPICS, ClusterState, is_internal
from kafka_policy_proxy.policy.exceptions import compile_exceptions
from kafka_policy_proxy.policy.java_policy import (
    JavaPolicy,
    JavaPolicyError,
    jar_digest,
    java_checks,
)
from kafka_policy_proxy.policy.model import (
    Action,
    Decision,
    Fact,
    Mode,
    Override,
    Principal,
    TopicRequest,
    Violation,
    assembler,
)
from kafka_policy_proxy.policy.overrides import apply_overrides, compile_overrides
from kafka_policy_proxy.policy.plugins import (
    PluginLoadError,
    PolicyPlugin,
    PolicyViolation,
    dispatch,
    load_plugin,
)
from kafka_policy_proxy.policy.revision import policy_revision
from kafka_policy_proxy.policy.rules import PolicyDocument, Selector
from kafka_policy_proxy.policy.streams import compile_streams

logger = logging.getLogger(__name__)

# What a plugin without `needs` reads: every fact but the costly in-use facts, which a plugin
# must name.
ALL_FACTS = frozenset(Fact) - {Fact.TOPIC_USAGE}
UNKNOWN_TOPIC_RULE = "unknown-topic"
_GLOB_CHARS = frozenset("*?[")
# Every topic's decision, and each violation, built with every field given (no `__init__`).
_DECISION = assembler(Decision)
_VIOLATION = assembler(Violation)


class _Names:
    """Exact names in a set, globs in one compiled regex."""

    __slots__ = ("exact", "glob")

    def __init__(self, patterns: Iterable[str]) -> None:
        patterns = list(patterns)
        self.exact = frozenset(p for p in patterns if not _GLOB_CHARS & set(p))
        globs = [p for p in patterns if p not in self.exact]
        self.glob = (
            re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in globs)) if globs else None
        )

    def __contains__(self, value: str) -> bool:
        return value in self.exact or (self.glob is not None and self.glob.match(value) is not None)


TopicMatch = Callable[[str], object]


@dataclass(frozen=True, slots=True)
class CompiledSelector:
    """A rule's selector: a topic matcher (one regex) and the client criteria.

    Actions and internal topics are handled by the plan, not here.
    """

    topic: TopicMatch | None
    principals: _Names | None
    except_principals: _Names | None
    client_ids: _Names | None

    @classmethod
    def build(cls, selector: Selector) -> CompiledSelector:
        """Compile a selector; prefix and regex become one anchored regex."""
        parts = []
        if selector.topic_prefix is not None:
            parts.append(f"(?={re.escape(selector.topic_prefix)})")
        if selector.topic is not None:
            parts.append(f"(?:{selector.topic})")
        elif parts:
            parts.append(".*")
        return cls(
            topic=re.compile("".join(parts), re.DOTALL).fullmatch if parts else None,
            principals=None if selector.principals is None else _Names(selector.principals),
            except_principals=_Names(selector.except_principals)
            if selector.except_principals
            else None,
            client_ids=None if selector.client_ids is None else _Names(selector.client_ids),
        )

    def selects_client(self, principal: Principal) -> bool:
        """Whether the principal and client id are selected."""
        if self.principals is not None and principal.name not in self.principals:
            return False
        if self.except_principals is not None and principal.name in self.except_principals:
            return False
        return self.client_ids is None or principal.client_id in self.client_ids

    def matches(self, request: TopicRequest, name: str) -> bool:
        """Whether the request's topic and client are selected."""
        if self.topic is not None and not self.topic(name):
            return False
        return self.selects_client(request.principal)


class _Entry(NamedTuple):
    """One rule's checks for one action kind."""

    rule: str
    mode: Mode
    selector: CompiledSelector
    internal: bool
    fns: tuple[CheckFn, ...]
    facts: frozenset[Fact]


# A plan step once the client criteria are settled: rule, mode, topic matcher, checks.
_Step = tuple[str, Mode, TopicMatch | None, tuple[CheckFn, ...]]
_PLAN_CACHE_SIZE = 4096
# The facts every selected topic needs, and (topic matcher, facts) for those that add to them.
_Needs = tuple[frozenset[Fact], tuple[tuple[TopicMatch, frozenset[Fact]], ...]]


@dataclass(frozen=True, slots=True)
class _Plugin:
    name: str
    mode: Mode
    selector: CompiledSelector
    internal: bool
    keys: frozenset[ActionKey]
    facts: frozenset[Fact]
    plugin: PolicyPlugin | None


def _keys(selector: Selector) -> frozenset[ActionKey]:
    if selector.actions is None:
        return frozenset(ALL_KEYS)
    return frozenset().union(*(ACTION_KEYS[a] for a in selector.actions))


class CompiledPolicy:
    """A validated policy compiled into per-action plans; evaluation is pure and thread-safe.

    Pickling ships the validated document and recompiles on unpickling, so each Spark
    executor gets fresh plugin instances (which it must `close()`).
    """

    def __init__(
        self,
        document: PolicyDocument,
        *,
        load_plugins: bool = True,
        revision: str | None = None,
        base_dir: Path | None = None,
    ) -> None:
        self.document = document
        # The policy_revision every decision record carries: the file's content hash, and the
        # bytes of any Java policy jar (a new jar is a new policy).
        self._text_revision = revision or policy_revision(document.model_dump_json())
        jars = [jar_digest(r.java_policy, base_dir) for r in document.rules if r.java_policy]
        self.revision = (
            policy_revision("\n".join([self._text_revision, *jars]))
            if jars
            else self._text_revision
        )
        self.dry_run = document.dry_run
        self._load_plugins = load_plugins
        self._base_dir = base_dir
        self._java: list[JavaPolicy] = []
        try:
            self._compile(document, load_plugins, base_dir)
        except BaseException:
            self._close_java()
            raise

    def _compile(self, document: PolicyDocument, load_plugins: bool, base_dir: Path | None) -> None:
        plans: dict[ActionKey, list[_Entry]] = {key: [] for key in ALL_KEYS}
        for index, rule in enumerate(document.rules):
            mode = Mode.AUDIT if document.dry_run else rule.mode
            selector = CompiledSelector.build(rule.match)
            wanted = _keys(rule.match)
            checks: list[Check]
            if rule.streams is not None:
                checks = compile_streams(rule.streams)
            elif rule.java_policy is not None:
                if not load_plugins:
                    continue
                try:
                    checks, java = java_checks(rule, base_dir)
                except JavaPolicyError as exc:
                    path: tuple[str | int, ...] = ("rules", index, *exc.key.split("."))
                    raise PluginLoadError(str(exc), index, path) from exc
                self._java.append(java)
            else:
                checks = compile_rule(rule)
            for key in ALL_KEYS:
                if key not in wanted:
                    continue
                here = [c for c in checks if key in c.keys]
                if here:
                    fns = tuple(c.fn for c in here)
                    facts = frozenset().union(*(c.facts for c in here))
                    plans[key].append(
                        _Entry(rule.name, mode, selector, rule.match.internal, fns, facts)
                    )
        self._plans: dict[ActionKey, tuple[_Entry, ...]] = {k: tuple(v) for k, v in plans.items()}
        # (action, alter kind, internal?, principal, client id) -> the steps that apply.
        self._steps: dict[tuple[Any, ...], tuple[_Step, ...]] = {}
        # The same key -> the facts the rules the client criteria select need (`needs`).
        self._needs: dict[tuple[Any, ...], _Needs] = {}
        plugins: list[_Plugin] = []
        for index, spec in enumerate(document.plugins):
            instance = None
            if load_plugins:
                try:
                    instance = load_plugin(spec.class_, spec.config)
                except PluginLoadError as exc:
                    for started in plugins:
                        if started.plugin is not None:
                            started.plugin.close()
                    raise PluginLoadError(str(exc), index) from exc
            plugins.append(
                _Plugin(
                    name=spec.name,
                    mode=Mode.AUDIT if document.dry_run else spec.mode,
                    selector=CompiledSelector.build(spec.match),
                    internal=spec.match.internal,
                    keys=_keys(spec.match),
                    facts=ALL_FACTS if spec.needs is None else frozenset(spec.needs),
                    plugin=instance,
                )
            )
        self._plugins = tuple(plugins)
        self.budgets = compile_budgets(document)
        self._mode = Mode.AUDIT if document.dry_run else Mode.ENFORCE
        self._overrides = compile_overrides(
            document,
            lambda rule: CompiledSelector.build(rule.match).matches,
            lambda rule: _keys(rule.match),
        )
        self.exceptions = compile_exceptions(document, CompiledSelector.build, _keys)

    def override(self, request: TopicRequest) -> tuple[TopicRequest, tuple[Override, ...]]:
        """The request as the policy's override actions leave it, and what they changed."""
        if not self._overrides:
            return request, ()
        return apply_overrides(self._overrides, request, _is_internal(request, request.name))

    def __getstate__(self) -> dict[str, Any]:
        return {
            "document": self.document,
            "load_plugins": self._load_plugins,
            "revision": self._text_revision,
            "base_dir": self._base_dir,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["document"],
            load_plugins=state["load_plugins"],
            revision=state["revision"],
            base_dir=state.get("base_dir"),
        )

    def reads_usage(self, action: Action) -> bool:
        """Whether any rule or plugin may read the in-use facts of this action's requests."""
        entries = self._plans.get((action, None), ())
        plugins = (p.facts for p in self._plugins if (action, None) in p.keys)
        return any(Fact.TOPIC_USAGE in e.facts for e in entries) or any(
            Fact.TOPIC_USAGE in facts for facts in plugins
        )

    @property
    def max_groups(self) -> int:
        """The most consumer groups any `in_use` rule examines (the proxy's read bound)."""
        return max((r.in_use.max_groups for r in self.document.rules if r.in_use), default=0)

    @property
    def rule_names(self) -> tuple[str, ...]:
        """The rule and plugin names, in declaration order."""
        return tuple(r.name for r in self.document.rules) + tuple(p.name for p in self._plugins)

    def _plan(self, request: TopicRequest) -> tuple[_Entry, ...]:
        plan = self._plans.get((request.action, request.alter_kind))
        if plan is None:
            raise ValueError(
                f"request for {request.name!r}: action {request.action.value!r} "
                f"with alter_kind {request.alter_kind!r} is not a valid combination"
            )
        return plan

    def _steps_for(self, request: TopicRequest, internal: bool) -> tuple[_Step, ...]:
        """The plan for this action, filtered by client criteria once per principal/client."""
        principal = request.principal
        key = (request.action, request.alter_kind, internal, principal.name, principal.client_id)
        steps = self._steps.get(key)
        if steps is None:
            steps = tuple(
                (e.rule, e.mode, e.selector.topic, e.fns)
                for e in self._plan(request)
                if (e.internal or not internal) and e.selector.selects_client(principal)
            )
            # Bounded so that a flood of client ids cannot grow it; dict stores are atomic.
            if len(self._steps) < _PLAN_CACHE_SIZE:
                self._steps[key] = steps
        return steps

    def _needs_for(self, request: TopicRequest, internal: bool) -> _Needs:
        """The facts of the rules the client criteria select, once per principal/client: those
        of every topic, and those of the rules with a topic matcher that add to them."""
        principal = request.principal
        key = (request.action, request.alter_kind, internal, principal.name, principal.client_id)
        found = self._needs.get(key)
        if found is None:
            entries = [
                e
                for e in self._plan(request)
                if e.facts and (e.internal or not internal) and e.selector.selects_client(principal)
            ]
            always: frozenset[Fact] = frozenset().union(
                *(e.facts for e in entries if e.selector.topic is None)
            )
            # A topic being created has no current state.
            none = {Fact.TOPIC_STATE} if request.action is Action.CREATE else set()
            always -= none
            by_topic = tuple(
                (e.selector.topic, e.facts - none)
                for e in entries
                if e.selector.topic is not None and not e.facts - none <= always
            )
            found = (always, by_topic)
            if len(self._needs) < _PLAN_CACHE_SIZE:
                self._needs[key] = found
        return found

    def needs(self, request: TopicRequest) -> frozenset[Fact]:
        """The cluster facts the rules that select this request will read."""
        name = request.name
        internal = _is_internal(request, name)
        always, by_topic = self._needs_for(request, internal)
        if name and not by_topic and not self._plugins:
            return always
        facts = set(always)
        if not name:
            facts.add(Fact.TOPIC_STATE)
        for topic_match, wanted in by_topic:
            if topic_match(name):
                facts |= wanted
        key = (request.action, request.alter_kind)
        for plugin in self._plugins:
            if key not in plugin.keys or (internal and not plugin.internal):
                continue
            if plugin.selector.matches(request, name):
                facts |= plugin.facts
        if request.action is Action.CREATE:
            facts.discard(Fact.TOPIC_STATE)  # a topic being created has no current state
        return frozenset(facts)

    def evaluate(self, request: TopicRequest, cluster: ClusterState) -> Decision:
        """Evaluate every selected rule and plugin, in declaration order, for one topic."""
        name = request.name
        current = request.current  # `_is_internal`, inline: this runs for every topic
        internal = name in INTERNAL_TOPICS or (current is not None and current.internal)
        steps = self._steps_for(request, internal)
        violations: list[Violation] = []
        if not name:
            violations.append(
                Violation(
                    UNKNOWN_TOPIC_RULE,
                    f"[{UNKNOWN_TOPIC_RULE}] topic id {request.topic_id!r} does not name a "
                    "known topic; denied because no rule can be checked",
                    self._mode,
                )
            )
        # Plain tuples: unpacking is the cheapest way through the hot loop.
        for rule, mode, topic_match, fns in steps:
            if topic_match is not None and not topic_match(name):
                continue
            for fn in fns:
                message = fn(request, cluster)
                if message is not None:
                    if type(message) is not Verbatim:
                        message = f"[{rule}] {message}"
                    violations.append(_VIOLATION(rule, str(message), mode))
        if self._plugins:
            self._run_plugins(request, cluster, name, internal, violations)
        allowed = not violations or all(v.mode is Mode.AUDIT for v in violations)
        return _DECISION(name, request.action, allowed, tuple(violations), self._mode, (), (), ())

    def _run_plugins(
        self,
        request: TopicRequest,
        cluster: ClusterState,
        name: str,
        internal: bool,
        violations: list[Violation],
    ) -> None:
        key = (request.action, request.alter_kind)
        for spec in self._plugins:
            if spec.plugin is None or key not in spec.keys or (internal and not spec.internal):
                continue
            if not spec.selector.matches(request, name):
                continue
            try:
                dispatch(spec.plugin, request, cluster)
            except PolicyViolation as exc:
                violations.append(Violation(spec.name, f"[{spec.name}] {exc}", spec.mode))
            except Exception as exc:
                # Fail closed: a broken plugin must not let requests through unchecked.
                logger.exception(
                    "policy plugin %r failed on topic %r (%s); denying",
                    spec.name,
                    name,
                    request.action.value,
                )
                message = (
                    f"[{spec.name}] topic {name!r}: the policy plugin failed "
                    f"({type(exc).__name__}); denied"
                )
                violations.append(Violation(spec.name, message, spec.mode))

    def close(self) -> None:
        """Close every plugin and Java policy; errors are logged, and each gets its call."""
        for spec in self._plugins:
            if spec.plugin is None:
                continue
            try:
                spec.plugin.close()
            except Exception:
                logger.exception("policy plugin %r failed to close", spec.name)
        self._close_java()

    def _close_java(self) -> None:
        for java in self._java:
            java.close()
        self._java.clear()


def _is_internal(request: TopicRequest, name: str | None) -> bool:
    current = request.current
    return is_internal(name, current is not None and current.internal)
