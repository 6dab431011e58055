"""Many topic decisions of one request, summarised: counts by decision and rule, and a sample.

A request judged for more topics than `audit.max_records_per_request` is recorded as one
summary record (`decision_log.summary_record`, schema 3) instead of one record per topic, so
that one request writes a bounded audit whatever its size (docs/audit-log.md).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kafka_policy_proxy.policy.decision_log import Outcome, outcome
from kafka_policy_proxy.policy.model import Decision, Mode

# A message is the rule's own text, but may quote what the client sent: keep the head.
MAX_MESSAGE_CHARS = 512
# The request's decision is its topics' worst: any refusal, then audit-would-deny, allowed.
_PASSING = (Outcome.AUDIT_WOULD_DENY, Outcome.ALLOWED)
_SEVERITY = (
    Outcome.DENIED,
    *(o for o in Outcome if o not in (Outcome.DENIED, *_PASSING)),
    *_PASSING,
)


@dataclass(frozen=True, slots=True)
class Summary:
    """The summary record's decision, violations (one per rule) and `summary` field."""

    decision: Outcome
    mode: Mode
    violations: list[dict[str, Any]]
    fields: dict[str, Any]


def summarise(decisions: Sequence[Decision], sample_size: int) -> Summary:
    """Counts by decision and by (decision, rule), the first `sample_size` topics and the
    first topic of every rule not among them (at most `2 * sample_size` in all)."""
    by_decision: Counter[Outcome] = Counter()
    by_rule: Counter[tuple[Outcome, str, Mode]] = Counter()
    first_violation: dict[str, dict[str, Any]] = {}
    sample: list[dict[str, Any]] = []
    for index, decision in enumerate(decisions):
        result = outcome(decision)
        by_decision[result] += 1
        rules: list[str] = []
        new_rule = False
        for violation in decision.violations:
            if violation.rule in rules:
                continue  # two checks of one rule count once, as the report counts them
            rules.append(violation.rule)
            by_rule[(result, violation.rule, violation.mode)] += 1
            if violation.rule not in first_violation:
                new_rule = True
                first_violation[violation.rule] = violation.to_dict() | {
                    "message": violation.message[:MAX_MESSAGE_CHARS]
                }
        if index < sample_size or (new_rule and len(sample) < 2 * sample_size):
            sample.append({"topic": decision.topic, "decision": result.value, "rules": rules})
    counts = [
        {"decision": d.value, "rule": None, "rule_mode": None, "topics": n}
        for d, n in sorted(by_decision.items(), key=lambda item: _SEVERITY.index(item[0]))
    ] + [
        {"decision": d.value, "rule": rule, "rule_mode": mode.value, "topics": n}
        for (d, rule, mode), n in sorted(by_rule.items())
    ]
    worst = next(d for d in _SEVERITY if by_decision[d])
    return Summary(
        decision=worst,
        mode=decisions[0].mode,
        violations=list(first_violation.values()),
        fields={
            "topics": len(decisions),
            "counts": counts,
            "sample": sample,
            "unsampled": len(decisions) - len(sample),
        },
    )
