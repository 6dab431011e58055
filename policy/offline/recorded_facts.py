"""The facts a recorded audit event carries: a `FactSource` for replaying decisions.

An event carries the request as the proxy resolved it: the topic's current state when the
recorded policy needed it, and the broker defaults folded into the requested configs when it
needed those. It never carries cluster-wide facts (topic names, broker count, total
partitions, budget usage). A candidate policy may need more than the recorded one did:

- nothing missing: the recorded request is judged as it is;
- something missing and no snapshot: FactsNotRecorded, naming the facts, never a guess;
- something missing and a snapshot: the snapshot supplies it. The event's own current state
  wins over the snapshot's state of that topic (`WithTopic`); a missing current state or
  broker defaults are resolved from the snapshot as the proxy would resolve them.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafka_policy_proxy.policy.cluster import ClusterState
from kafka_policy_proxy.policy.judge import NO_FACTS, FactQuery, Facts, FactsNotRecorded
from kafka_policy_proxy.policy.model import (
    Action,
    AlterKind,
    ConfigOp,
    ConfigSource,
    Fact,
    TopicRequest,
)
from kafka_policy_proxy.policy.overlays import WithTopic

# Facts the checks read from the cluster itself; an audit event never records them.
CLUSTER_WIDE = frozenset(
    {Fact.TOPIC_NAMES, Fact.BROKER_COUNT, Fact.TOTAL_PARTITIONS, Fact.BUDGET_USAGE}
)
# Facts `resolve` folds into the request itself.
ON_REQUEST = frozenset({Fact.TOPIC_STATE, Fact.BROKER_DEFAULTS, Fact.TOPIC_USAGE})
USAGE_NOT_RECORDED = (
    "needs the in-use facts (latest writes, consumer groups), which only an event judged by "
    "an in_use rule records"
)

_NOT_RECORDED: dict[frozenset[Fact], str] = {}
# The actions whose checks read the in-use facts.
_USED = frozenset({Action.DELETE, Action.DELETE_RECORDS})


def defaults_folded(request: TopicRequest) -> bool | None:
    """Whether the broker defaults are in the recorded requested state; None if they can't matter.

    Defaults matter for a create and a full config replacement (every config not named takes
    its default), and for an incremental alter that resets a config or whose current state is
    unknown. `current.configs` are effective configs, so they already hold the defaults.
    """
    requested = request.requested
    if request.action is not Action.CREATE:
        if request.alter_kind is not AlterKind.CONFIGS:
            return None
        if requested.config_source is ConfigSource.INCREMENTAL and request.current is not None:
            last = {c.name: c.op for c in requested.changes}
            reset = [name for name, op in last.items() if op is ConfigOp.DELETE]
            if not reset:
                return None
            # Reset to its default, a config stays; without a default to go back to, it is gone.
            return any(name in requested.configs for name in reset)
    # Without defaults the effective configs hold only the named ones.
    return not requested.configs.keys() <= requested.named


def missing_facts(request: TopicRequest, needs: frozenset[Fact]) -> frozenset[Fact]:
    """The facts among `needs` that the recorded request does not carry."""
    missing = needs & CLUSTER_WIDE
    if (
        Fact.TOPIC_STATE in needs
        and request.current is None
        and request.action is not Action.CREATE
    ):
        missing |= {Fact.TOPIC_STATE}
    if Fact.BROKER_DEFAULTS in needs and defaults_folded(request) is False:
        missing |= {Fact.BROKER_DEFAULTS}
    if Fact.TOPIC_USAGE in needs and request.usage is None and request.action in _USED:
        missing |= {Fact.TOPIC_USAGE}
    return missing


def not_recorded(missing: frozenset[Fact]) -> str:
    """Why a request cannot be judged from its event alone: the facts it lacks."""
    reason = _NOT_RECORDED.get(missing)
    if reason is None:  # few distinct sets: computed once each
        names = ", ".join(sorted(f.value for f in missing))
        reason = _NOT_RECORDED[missing] = f"needs cluster facts: {names}; pass --snapshot"
    return reason


@dataclass(frozen=True, slots=True)
class RecordedFacts:
    """A `FactSource` for one recorded request: its own facts, then the snapshot's, if any.

    The in-use facts come from the event (`in_use`, folded into `request.usage`): a snapshot
    holds them only where it was described with them.
    """

    request: TopicRequest
    snapshot: ClusterState | None = None

    def read(self, query: FactQuery) -> Facts:
        """The facts the request carries, supplemented from the snapshot; FactsNotRecorded."""
        request, needs = self.request, query.facts
        missing = missing_facts(request, needs) if needs else needs
        if not missing:
            return Facts(self.snapshot, frozenset()) if self.snapshot is not None else NO_FACTS
        # A topic the snapshot lacks is answered unknown-topic; one it has needs the facts.
        snapshot = self.snapshot
        if Fact.TOPIC_USAGE in missing and (
            snapshot is None
            or (
                snapshot.topic_usage(request.name) is None
                and (request.current is not None or snapshot.topic(request.name) is not None)
            )
        ):
            raise FactsNotRecorded(USAGE_NOT_RECORDED)
        if self.snapshot is None:
            raise FactsNotRecorded(not_recorded(missing))
        cluster = self.snapshot
        if request.current is not None:
            cluster = WithTopic(cluster, request.current)
        if not missing & ON_REQUEST:
            return Facts(cluster, frozenset())
        # Recomputed from the recorded changes: defaults already folded in are folded again
        # (from the snapshot), never applied on top of themselves.
        wanted = (needs | {Fact.BROKER_DEFAULTS}) if defaults_folded(request) else needs
        return Facts(cluster, wanted)
