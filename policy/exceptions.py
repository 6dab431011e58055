"""Exceptions that expire: compiled once, matched per request, applied to a Decision.

An exception waives the enforced violations of the rules and plugins it names, for the
requests its selector matches, while `now < expires`. The judge passes `now` per decision, so
an exception stops waiving at its expiry instant with no reload; nothing here reads a clock.
A waived violation leaves `violations` for `waived` (rule, exception, ticket, expiry, the
message it would have denied with); the decision is allowed once no enforced violation is
left. Audit-mode violations are never waived (they deny nothing), and neither is a denial
that is not a rule's: unreadable cluster state, a missing topic (`UNWAIVABLE`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Protocol

from kafka_policy_proxy.policy.checks import ActionKey
from kafka_policy_proxy.policy.cluster import is_internal
from kafka_policy_proxy.policy.model import (
    Decision,
    Mode,
    Principal,
    TopicRequest,
    Violation,
    Waiver,
)
from kafka_policy_proxy.policy.rules import PolicyDocument, Selector

# The judge's own denials, which no policy rule makes and so no exception may waive:
# judge.CLUSTER_STATE_RULE and decision_log.UNKNOWN_TOPIC_RULE (both import this module).
UNWAIVABLE = frozenset({"cluster-state", "unknown-topic"})

# A plan's cache bound, as the engine's: a flood of client ids cannot grow it.
_CACHE_SIZE = 4096


class Selects(Protocol):
    """A compiled selector (the engine's `CompiledSelector`): a topic matcher, client criteria."""

    @property
    def topic(self) -> Callable[[str], object] | None:
        """Matches the whole topic name; None selects every topic."""
        ...

    def selects_client(self, principal: Principal) -> bool:
        """Whether the principal and client id are selected."""
        ...


def rfc3339(moment: datetime) -> str:
    """An aware time as RFC 3339 in UTC, `Z`-suffixed (microseconds only when set)."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def record_time(moment: datetime) -> str:
    """An aware time as a decision record writes its times: UTC, always microseconds (the
    lake's Spark schema reads them in that one format)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True, slots=True)
class CompiledException:
    """One exception: what it selects, what it waives, and until when."""

    name: str
    selector: Selects
    keys: frozenset[ActionKey]
    internal: bool
    waive: frozenset[str]
    ticket: str | None
    expires: datetime
    expires_text: str

    def in_force(self, now: datetime) -> bool:
        """Whether it waives at `now`: strictly before its expiry instant."""
        return now < self.expires


class Exceptions:
    """A policy's exceptions, in declaration order (the first that waives a rule names it).

    Which exceptions select a request's action, principal and client id is worked out once per
    combination and cached, as the engine caches its plan steps; per decision only the expiry
    and the topic are compared.
    """

    __slots__ = ("_by_client", "_waivable", "items")

    def __init__(self, items: Sequence[CompiledException] = ()) -> None:
        self.items = tuple(items)
        self._waivable = frozenset().union(*(e.waive for e in self.items))
        self._by_client: dict[tuple[object, ...], tuple[CompiledException, ...]] = {}

    def in_force(self, now: datetime) -> tuple[CompiledException, ...]:
        """Those waiving at `now`."""
        return tuple(e for e in self.items if e.in_force(now))

    def expired(self, now: datetime) -> tuple[CompiledException, ...]:
        """Those past their expiry instant at `now`."""
        return tuple(e for e in self.items if not e.in_force(now))

    def apply(self, request: TopicRequest, decision: Decision, now: datetime | None) -> Decision:
        """The decision with every enforced violation an in-force, matching exception waives
        moved to `waived`; allowed once none is left. `now` None waives nothing."""
        if now is None or decision.allowed or not self._waivable:
            return decision
        if not any(v.rule in self._waivable for v in decision.violations):
            return decision
        name = request.name
        usable = [
            e
            for e in self._selecting(request, name)
            if now < e.expires and (e.selector.topic is None or e.selector.topic(name))
        ]
        if not usable:
            return decision
        kept: list[Violation] = []
        waived: list[Waiver] = []
        for violation in decision.violations:
            by = _waiver(usable, violation)
            if by is None:
                kept.append(violation)
            else:
                waived.append(
                    Waiver(violation.rule, by.name, by.ticket, by.expires_text, violation.message)
                )
        if not waived:
            return decision
        allowed = all(v.mode is Mode.AUDIT for v in kept)
        return replace(
            decision,
            allowed=allowed,
            violations=tuple(kept),
            waived=decision.waived + tuple(waived),
        )

    def _selecting(self, request: TopicRequest, name: str) -> tuple[CompiledException, ...]:
        """The exceptions whose action, internal-topic and client criteria take the request."""
        current = request.current
        internal = is_internal(name, current is not None and current.internal)
        principal = request.principal
        action = (request.action, request.alter_kind)
        key = (action, internal, principal.name, principal.client_id)
        found = self._by_client.get(key)
        if found is None:
            found = tuple(
                e
                for e in self.items
                if action in e.keys
                and (e.internal or not internal)
                and e.selector.selects_client(principal)
            )
            if len(self._by_client) < _CACHE_SIZE:
                self._by_client[key] = found
        return found


def _waiver(usable: Sequence[CompiledException], violation: Violation) -> CompiledException | None:
    if violation.mode is not Mode.ENFORCE or violation.rule in UNWAIVABLE:
        return None
    return next((e for e in usable if violation.rule in e.waive), None)


def compile_exceptions(
    document: PolicyDocument,
    build: Callable[[Selector], Selects],
    keys: Callable[[Selector], frozenset[ActionKey]],
) -> Exceptions:
    """Compile the document's exceptions with the engine's selectors."""
    return Exceptions(
        [
            CompiledException(
                name=spec.name,
                selector=build(spec.match),
                keys=keys(spec.match),
                internal=spec.match.internal,
                waive=frozenset(spec.waive),
                ticket=spec.ticket,
                expires=spec.expires,
                expires_text=record_time(spec.expires),
            )
            for spec in document.exceptions
        ]
    )


def exception_problems(
    document: PolicyDocument, now: datetime | None
) -> list[tuple[tuple[str | int, ...], str]]:
    """What the schema cannot see: duplicate names, waivers of rules the policy lacks, and
    (given the loading instant `now`) expiries beyond `exception_policy.max_days`."""
    problems: list[tuple[tuple[str | int, ...], str]] = []
    known = (
        {r.name for r in document.rules}
        | {p.name for p in document.plugins}
        | {b.name for b in document.budgets}
    )
    seen: set[str] = set()
    cap = document.exception_policy
    for index, spec in enumerate(document.exceptions):
        at = ("exceptions", index)
        if spec.name in seen:
            problems.append(((*at, "name"), f"duplicate exception name {spec.name!r}"))
        seen.add(spec.name)
        for position, rule in enumerate(spec.waive):
            if rule == "*":
                problems.append(
                    (
                        (*at, "waive", position),
                        "`*` is refused: name each rule, so that a rule added later is not "
                        "waived unseen",
                    )
                )
            elif rule not in known:
                problems.append(
                    (
                        (*at, "waive", position),
                        f"no rule, plugin or budget named {rule!r} in this policy",
                    )
                )
        if cap is not None and now is not None:
            days = (spec.expires - now).total_seconds() / 86400
            if days > cap.max_days:
                problems.append(
                    (
                        (*at, "expires"),
                        f"{rfc3339(spec.expires)} is {days:.1f} days after {rfc3339(now)}; "
                        f"exception_policy.max_days allows {cap.max_days}",
                    )
                )
    return problems
