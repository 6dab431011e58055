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

from kafka_policy_proxy.policy.checks import ActionKey
from kafka_policy_proxy.policy.cluster import is_internal
from kafka_policy_proxy.policy.model import Decision, Mode, TopicRequest, Violation, Waiver
from kafka_policy_proxy.policy.rules import PolicyDocument, Selector

# The judge's own denials, which no policy rule makes and so no exception may waive.
UNWAIVABLE = frozenset({"cluster-state", "unknown-topic"})

# Whether a selector takes a request: (request, topic name) -> bool.
Selects = Callable[[TopicRequest, str], bool]


def rfc3339(moment: datetime) -> str:
    """An aware time as RFC 3339 in UTC, `Z`-suffixed (microseconds only when set)."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class CompiledException:
    """One exception: what it selects, what it waives, and until when."""

    name: str
    selects: Selects
    keys: frozenset[ActionKey]
    internal: bool
    waive: frozenset[str]
    ticket: str | None
    expires: datetime
    expires_text: str

    def in_force(self, now: datetime) -> bool:
        """Whether it waives at `now`: strictly before its expiry instant."""
        return now < self.expires

    def takes(self, request: TopicRequest, name: str) -> bool:
        """Whether its selector matches the request (action, topic, client)."""
        if (request.action, request.alter_kind) not in self.keys:
            return False
        current = request.current
        if is_internal(name, current is not None and current.internal) and not self.internal:
            return False
        return self.selects(request, name)


@dataclass(frozen=True, slots=True)
class Exceptions:
    """A policy's exceptions, in declaration order (the first that waives a rule names it)."""

    items: tuple[CompiledException, ...] = ()

    def in_force(self, now: datetime) -> tuple[CompiledException, ...]:
        """Those waiving at `now`."""
        return tuple(e for e in self.items if e.in_force(now))

    def expired(self, now: datetime) -> tuple[CompiledException, ...]:
        """Those past their expiry instant at `now`."""
        return tuple(e for e in self.items if not e.in_force(now))

    def apply(self, request: TopicRequest, decision: Decision, now: datetime | None) -> Decision:
        """The decision with every enforced violation an in-force, matching exception waives
        moved to `waived`; allowed once none is left. `now` None waives nothing."""
        if not self.items or now is None or decision.allowed:
            return decision
        name = request.name
        usable = [e for e in self.items if e.in_force(now) and e.takes(request, name)]
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


def _waiver(usable: Sequence[CompiledException], violation: Violation) -> CompiledException | None:
    if violation.mode is not Mode.ENFORCE or violation.rule in UNWAIVABLE:
        return None
    return next((e for e in usable if violation.rule in e.waive), None)


def compile_exceptions(
    document: PolicyDocument,
    selects: Callable[[Selector], Selects],
    keys: Callable[[Selector], frozenset[ActionKey]],
) -> Exceptions:
    """Compile the document's exceptions with the engine's selector matching."""
    return Exceptions(
        tuple(
            CompiledException(
                name=spec.name,
                selects=selects(spec.match),
                keys=keys(spec.match),
                internal=spec.match.internal,
                waive=frozenset(spec.waive),
                ticket=spec.ticket,
                expires=spec.expires,
                expires_text=rfc3339(spec.expires),
            )
            for spec in document.exceptions
        )
    )


def exception_problems(
    document: PolicyDocument, now: datetime | None
) -> list[tuple[tuple[str | int, ...], str]]:
    """What the schema cannot see: duplicate names, waivers of rules the policy lacks, and
    (given the loading instant `now`) expiries beyond `exception_policy.max_days`."""
    problems: list[tuple[tuple[str | int, ...], str]] = []
    known = {r.name for r in document.rules} | {p.name for p in document.plugins}
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
                    ((*at, "waive", position), f"no rule or plugin named {rule!r} in this policy")
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
