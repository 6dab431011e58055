"""Judging in a budget's turn, for every filter whose requests can create or grow topics.

The requests a budget judges are judged in the turn of their budget keys
(proxy/cluster/budget_locks.py), over what earlier holders had the broker accept; the caller
holds the turn until the broker's answer (`recording`) or gives it back where nothing is
forwarded. A turn not had in time denies every request (fail closed).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from kafka_policy_proxy.policy.budgets import keys_of, requested_state
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.judge import Judgement, Verdict
from kafka_policy_proxy.policy.model import TopicRequest, TopicState
from kafka_policy_proxy.proxy.cluster.budget_locks import BudgetLocks, Turn, TurnTimeout
from kafka_policy_proxy.proxy.cluster.live_facts import LiveFacts


async def judged_in_turn(
    locks: BudgetLocks,
    facts: LiveFacts,
    policy: CompiledPolicy,
    requests: Sequence[TopicRequest],
    connection_id: int,
    *,
    take_turn: bool = True,
    creating: bool = False,
) -> tuple[list[Verdict], Turn | None]:
    """The verdicts, and the turn now held if a budget judges a request (`take_turn` false:
    judged without one, as a validate-only request is). `creating`: the requests are creates
    of topics the reads lack, the broker creating what it lacks; one the ledger shows created
    already is left out (no verdict), as the broker would create it only once."""
    keys = keys_of(policy.budgets, requests) if take_turn else []
    if not keys:
        return await facts.judge(policy, requests), None
    try:
        turn = await locks.acquire(keys, connection_id)
    except TurnTimeout as exc:
        return Judgement(policy, requests).unavailable(str(exc)), None
    try:
        pending = turn.pending()
        if creating:
            shown = {state.name for state in pending}
            requests = [r for r in requests if r.name not in shown]
        return await facts.judge(policy, requests, pending), turn
    except BaseException:
        turn.release()
        raise


def budgeted(verdicts: Iterable[Verdict]) -> dict[str, TopicState]:
    """The topics' states after the allowed changes a budget counted: the turn's ledger."""
    return {
        v.request.name: requested_state(v.request, {})
        for v in verdicts
        if v.request.name and v.decision is not None and v.decision.budgets
    }


def recording(
    turn: Turn, hook: Callable[[bytes], bytes], accepted: Callable[[bytes], Iterable[TopicState]]
) -> Callable[[bytes], bytes]:
    """The response hook `hook`, then what the broker `accepted` written to the turn's
    ledger; the turn is given back whatever happens."""

    def after(body: bytes) -> bytes:
        try:
            answered = hook(body)
            turn.record(list(accepted(body)))
            return answered
        finally:
            turn.release()

    return after
