"""Running a `policy test` suite: each case judged as `policy eval` judges it, then compared
with what the case expects of each topic and each other config resource."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

from kafka_policy_proxy.policy.broker_configs import BrokerConfigDecision
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.model import Decision
from kafka_policy_proxy.policy.offline.scenario import (
    Expectation,
    Suite,
    evaluate_resources,
    evaluate_spec,
    resource_key,
)


@dataclass(frozen=True, slots=True)
class CaseResult:
    """A test case's outcome: the failures (empty when it passed), the decisions, of the
    topics and of the other config resources, what the case expected, and how long it took."""

    name: str
    failures: tuple[str, ...]
    decisions: tuple[Decision, ...]
    resources: tuple[BrokerConfigDecision, ...]
    expected: dict[str, Expectation]
    seconds: float

    @property
    def passed(self) -> bool:
        """Whether every expectation held."""
        return not self.failures


def run_suite(
    policy: CompiledPolicy, suite: Suite, now: datetime | None = None
) -> list[CaseResult]:
    """Run every case of a suite against a policy, each at its own `now` or else this one."""
    results = []
    for case in suite.cases:
        started = time.perf_counter()
        cluster = (case.cluster or suite.cluster).build()
        verdicts = evaluate_spec(policy, case.request, cluster, now=case.now or now)
        decisions = [v.decision for v in verdicts if v.decision is not None]
        resources = evaluate_resources(policy, case.request, cluster)
        judged: dict[str, Decision | BrokerConfigDecision] = {d.topic: d for d in decisions}
        judged |= {resource_key(r.request): r for r in resources}
        failures = []
        for key, expected in case.expect.items():
            decision = judged.get(key)
            if decision is None:
                failures.append(
                    f"{key}: no decision (the request does not name this topic or resource)"
                )
                continue
            failures += _compare(key, expected, decision)
        results.append(
            CaseResult(
                case.name,
                tuple(failures),
                tuple(decisions),
                tuple(resources),
                case.expect,
                time.perf_counter() - started,
            )
        )
    return results


def _compare(
    key: str, expected: Expectation, decision: Decision | BrokerConfigDecision
) -> list[str]:
    failures = []
    if expected.allowed is not None and expected.allowed != decision.allowed:
        verdict = "allowed" if decision.allowed else "denied"
        failures.append(
            f"{key}: expected {'allowed' if expected.allowed else 'denied'}, got {verdict}"
        )
    rules = [v.rule for v in decision.violations]
    if expected.violations is not None and expected.violations != rules:
        failures.append(f"{key}: expected violations {expected.violations}, got {rules}")
    if expected.message_contains is not None and not any(
        expected.message_contains in v.message for v in decision.violations
    ):
        failures.append(f"{key}: no message contains {expected.message_contains!r}")
    if expected.waived is not None:
        waived = [w.rule for w in decision.waived] if isinstance(decision, Decision) else []
        if expected.waived != waived:
            failures.append(f"{key}: expected waived {expected.waived}, got {waived}")
    return failures
