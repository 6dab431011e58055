"""Policy evaluation inside Spark executors, shared by the replay and scan jobs.

Executors get the policy as YAML text and the cluster as JSON text (never a driver path);
each Python worker process compiles or rebuilds them once, keyed by a hash of the text, and
reuses them for every batch. One request gives an `Outcome`: the decision string the proxy
logs (`allowed`, `denied`, `audit-would-deny`), the violated rules and their messages.
"""

from __future__ import annotations

import atexit
import hashlib
import json
from typing import NamedTuple

from policy.builders import resolve
from policy.cluster import ClusterState, InMemoryCluster
from policy.engine import CompiledPolicy
from policy.loader import load_policy
from policy.model import Action, Decision, Fact, TopicRequest
from proxy.audit import outcome

# The proxy's rule for a topic it could not see (proxy.enforcement.CLUSTER_STATE_RULE); not
# imported from there because that module pulls the whole wire codec into every worker.
CLUSTER_STATE_RULE = "cluster-state"

_POLICIES: dict[tuple[str, str], CompiledPolicy] = {}
_CLUSTERS: dict[str, InMemoryCluster] = {}
# A worker sees few distinct policies and clusters; the bound only guards against leaks.
_CACHE_SIZE = 8


class Outcome(NamedTuple):
    """One request's verdict: the audit log's decision string, violated rules, messages."""

    decision: str
    rules: list[str]
    messages: list[str]


def _key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def compiled(policy_text: str, name: str = "<policy>") -> CompiledPolicy:
    """The policy compiled from its YAML text once per process; PolicyError if it is invalid."""
    key = (_key(policy_text), name)
    policy = _POLICIES.get(key)
    if policy is None:
        policy = load_policy(policy_text, name)
        if len(_POLICIES) >= _CACHE_SIZE:
            _POLICIES.pop(next(iter(_POLICIES))).close()
        _POLICIES[key] = policy
    return policy


def cluster_json(cluster: InMemoryCluster) -> str:
    """The cluster as JSON text to ship to executors (see `shipped_cluster`)."""
    return json.dumps(cluster.to_dict(), separators=(",", ":"))


def shipped_cluster(text: str) -> InMemoryCluster:
    """The cluster from `cluster_json` text, rebuilt once per process."""
    key = _key(text)
    cluster = _CLUSTERS.get(key)
    if cluster is None:
        cluster = InMemoryCluster.from_dict(json.loads(text))
        if len(_CLUSTERS) >= _CACHE_SIZE:
            _CLUSTERS.pop(next(iter(_CLUSTERS)))
        _CLUSTERS[key] = cluster
    return cluster


def outcome_of(decision: Decision) -> Outcome:
    """A Decision as an Outcome: the proxy's decision string, rules and messages in order."""
    violations = decision.violations
    return Outcome(outcome(decision), [v.rule for v in violations], [v.message for v in violations])


def evaluate(policy: CompiledPolicy, request: TopicRequest, cluster: ClusterState) -> Outcome:
    """Evaluate one request as it is (its facts already resolved) against the cluster."""
    return outcome_of(policy.evaluate(request, cluster))


def judge(policy: CompiledPolicy, request: TopicRequest, cluster: ClusterState) -> Outcome:
    """Judge one unresolved request as the proxy does: fetch the facts it needs, then evaluate.

    A non-create whose current state the rules need but the cluster does not have is denied
    under the `cluster-state` rule, as the proxy denies it.
    """
    facts = policy.needs(request)
    resolved = resolve(request, cluster, facts) if facts else request
    if (
        resolved.current is None
        and resolved.action is not Action.CREATE
        and Fact.TOPIC_STATE in policy.needs(resolved)
    ):
        return missing_topic(resolved)
    return evaluate(policy, resolved, cluster)


def missing_topic(request: TopicRequest) -> Outcome:
    """The proxy's denial of a request whose topic is not in the cluster it read."""
    message = (
        f"[{CLUSTER_STATE_RULE}] topic {request.name!r} is not in the cluster "
        "metadata the proxy read; denied because the policy needs its current state"
    )
    return Outcome("denied", [CLUSTER_STATE_RULE], [message])


@atexit.register
def _close() -> None:
    # Plugins hold resources; a worker process closes its policies when it exits.
    for policy in _POLICIES.values():
        policy.close()
    _POLICIES.clear()
