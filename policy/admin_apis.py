"""Cluster and security mutation APIs: who may call which, by the policy's `admin_apis` rules.

Denied by default: a call is allowed only when a rule names both its principal and its API.
A dry-run policy records the denial as audit-would-deny and lets the call through.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from kafka_policy_proxy.policy.model import Mode, Principal, Violation
from kafka_policy_proxy.policy.rules import AdminApiRule, PolicyDocument

ADMIN_APIS_RULE = "admin-apis"


@dataclass(frozen=True, slots=True)
class AdminRequest:
    """One call of a cluster or security mutation API, by name."""

    api: str
    principal: Principal

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict (a decision record's `request`)."""
        return {"api": self.api, "principal": self.principal.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AdminRequest:
        """Rebuild from `to_dict()` output (extra keys, such as `rule`, are ignored)."""
        return cls(data["api"], Principal.from_dict(data.get("principal") or {}))


@dataclass(frozen=True, slots=True)
class AdminDecision:
    """The verdict for one admin API call; `rule` names the rule that allowed it."""

    request: AdminRequest
    allowed: bool
    violations: tuple[Violation, ...] = ()
    mode: Mode = Mode.ENFORCE
    rule: str | None = None

    @property
    def message(self) -> str:
        """The enforced violations' messages joined for a Kafka error message."""
        return "; ".join(v.message for v in self.violations if v.mode is Mode.ENFORCE)


def _grants(rule: AdminApiRule, request: AdminRequest) -> bool:
    name = request.principal.name
    return any(fnmatchcase(name, p) for p in rule.principals) and (
        "*" in rule.apis or request.api in rule.apis
    )


def decide_admin(document: PolicyDocument, request: AdminRequest) -> AdminDecision:
    """Allowed if an `admin_apis` rule names the principal and the API; else denied."""
    mode = Mode.AUDIT if document.dry_run else Mode.ENFORCE
    for rule in document.admin_apis:
        if _grants(rule, request):
            return AdminDecision(request, True, mode=mode, rule=rule.name)
    message = (
        f"[{ADMIN_APIS_RULE}] {request.principal.name} may not call {request.api}: "
        "no admin_apis rule of the policy allows it"
    )
    violation = Violation(ADMIN_APIS_RULE, message, mode)
    return AdminDecision(request, mode is Mode.AUDIT, (violation,), mode)
