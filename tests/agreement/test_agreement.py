"""One judge: every offline entry point decides each request as `policy.judge` does.

The reference drives the judge as the proxy does; the proxy itself (wire frames through its
filter chain), `policy eval`, the replay (from recorded events with a snapshot, and from the
events alone) and the scan must give the same decision and the same violated rules, in order,
for every request they judge.
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.agreement.corpus import corpus_cluster, corpus_policy, generate
from tests.agreement.entry_points import Outcomes, Setting, outcomes_by_entry_point
from tests.agreement.proxy_leg import proxy

CORPUS = 10_000


@pytest.fixture(scope="module")
def outcomes() -> dict[str, Outcomes]:
    setting = Setting(corpus_policy(), corpus_cluster(), generate(CORPUS))
    return {**outcomes_by_entry_point(setting), "proxy": proxy(setting)}


def test_the_corpus_exercises_what_copies_used_to_disagree_on(
    outcomes: dict[str, Outcomes],
) -> None:
    reference = outcomes["reference"]
    decisions = Counter(decision for _, decision, _ in reference.values())
    rules = Counter(rule for _, _, found in reference.values() for rule in found)
    # allowed, denied, would-deny, a missing topic (answered as the broker would), undecided
    assert min(decisions.values()) > 50, decisions
    assert set(decisions) == {"allowed", "denied", "audit-would-deny", "unknown-topic", None}
    for rule in (
        "unknown-topic",  # a missing topic; the corpus never makes the facts unreadable
        "streams-internal-topics",
        "ops-cli-only-deletes",
        "no-compaction-for-alice",
        "segment-size",
        "metric-name-collision",
        "topic-limit",
        "replication",
        "protected-topics",
        "per-user-partitions",
        "payments-replicas",
        "orders-in-use",
    ):
        assert rules[rule] > 10, (rule, rules)


def test_the_corpus_exercises_exceptions_in_force_and_expired() -> None:
    setting = Setting(corpus_policy(), corpus_cluster(), generate(CORPUS))
    decisions = [v.decision for v in setting.verdicts.values() if v and v.decision]
    waivers = Counter(w.exception for d in decisions for w in d.waived)
    assert waivers["alice-payments-migration"] > 10, waivers
    assert waivers["bob-replication"] > 10, waivers  # in force until a microsecond later
    assert "expired-for-everyone" not in waivers  # expired at that very instant
    assert sum(d.allowed for d in decisions if d.waived) > 10


@pytest.mark.parametrize("entry_point", ["proxy", "policy eval", "replay", "scan"])
def test_every_entry_point_agrees_with_the_judge(
    outcomes: dict[str, Outcomes], entry_point: str
) -> None:
    reference, found = outcomes["reference"], outcomes[entry_point]
    assert len(found) >= 500
    assert set(found) <= set(reference)
    disagreements = {k: (reference[k], v) for k, v in found.items() if v != reference[k]}
    assert not disagreements, list(disagreements.items())[:5]


def test_eval_and_replay_judge_every_request_the_judge_does(
    outcomes: dict[str, Outcomes],
) -> None:
    reference = outcomes["reference"]
    requests = {k for k in reference if isinstance(k, int)}
    assert outcomes["proxy"].keys() == requests
    assert outcomes["policy eval"].keys() == requests
    decided = {k for k, (_, decision, _) in reference.items() if decision and isinstance(k, int)}
    assert outcomes["replay"].keys() == decided


def test_replay_without_a_snapshot_agrees_or_says_unknown(outcomes: dict[str, Outcomes]) -> None:
    reference, found = outcomes["reference"], outcomes["replay without snapshot"]
    unknown = {k for k, (_, decision, _) in found.items() if decision == "unknown"}
    assert 0 < len(unknown) < len(found)
    assert {k: v for k, v in found.items() if k not in unknown} == {
        k: reference[k] for k in found.keys() - unknown
    }
