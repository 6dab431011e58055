"""Which team owns a topic: the policy's `owners:` map, read by the scan's reports per team.

Ownership never changes a decision; it only says whose report a topic's results go to.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from kafka_policy_proxy.policy.budgets import CompiledBudget, budget_for_topic
from kafka_policy_proxy.policy.rules import OwnerSpec, PolicyDocument

# Topics no owner claims are reported under this label; no team name can spell it.
UNOWNED = "(unowned)"


def owns(spec: OwnerSpec, topic: str) -> bool:
    """Whether one of the owner's prefixes starts `topic`, or one of its regexes matches it all."""
    return topic.startswith(tuple(spec.topic_prefixes)) or any(
        re.fullmatch(pattern, topic) for pattern in spec.topics
    )


def owner_of(
    document: PolicyDocument, topic: str, budgets: Sequence[CompiledBudget] = ()
) -> str | None:
    """The team that owns `topic`, or None.

    The first owner in file order that matches wins, whatever matched (prefix or regex) and
    however long the match: list a narrower team before a broader one. A topic no owner
    claims belongs to the first of `budgets` (the policy's, compiled) that counts it: the
    budget's name, or the user a per-principal budget's prefix names.
    """
    for team, spec in document.owners.items():
        if owns(spec, topic):
            return team
    return budget_for_topic(budgets, topic)
