"""The filter chain's assembly: which filters the proxy runs, and in which order."""

from __future__ import annotations

from collections.abc import Callable

from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.proxy.audit.recorder import DecisionRecorder
from kafka_policy_proxy.proxy.cluster.budget_locks import BudgetLocks
from kafka_policy_proxy.proxy.cluster.live_facts import LiveFacts
from kafka_policy_proxy.proxy.config import AdmissionConfig
from kafka_policy_proxy.proxy.filters.address_rewrite import AddressRewriteFilter, BrokerListeners
from kafka_policy_proxy.proxy.filters.admin_apis import AdminApiFilter
from kafka_policy_proxy.proxy.filters.admission import AdmissionFilter, AuditBudget
from kafka_policy_proxy.proxy.filters.api_versions import ApiVersionsFilter
from kafka_policy_proxy.proxy.filters.auto_create_guard import AutoCreateGuardFilter
from kafka_policy_proxy.proxy.filters.chain import FilterChain
from kafka_policy_proxy.proxy.filters.principal_capture import PrincipalCaptureFilter
from kafka_policy_proxy.proxy.filters.request_bounds import ELEMENTS_PER_ENTRY, RequestBoundsFilter
from kafka_policy_proxy.proxy.filters.streams_topology import StreamsTopologyFilter
from kafka_policy_proxy.proxy.filters.topic_policy import TopicPolicyFilter


def proxy_chain(
    *,
    listeners: BrokerListeners,
    policy: Callable[[], CompiledPolicy | None],
    facts: LiveFacts,
    recorder: DecisionRecorder,
    legacy_error_code: int,
    max_entries_per_request: int = 5000,
    admission: AdmissionConfig | None = None,
    audit_budget: AuditBudget | None = None,
    principal_claim: str = "sub",
    budget_locks: BudgetLocks | None = None,
) -> FilterChain:
    """The proxy's filters in order; a request handled by several goes through each in turn."""
    # One set of budget turns for every filter whose requests can create or grow topics.
    locks = budget_locks or BudgetLocks()
    return FilterChain(
        [
            ApiVersionsFilter(),
            PrincipalCaptureFilter(policy, recorder, principal_claim),
            # Counted before anything decodes a guarded request's entries.
            RequestBoundsFilter(max_entries_per_request),
            # The rate and audit budget per principal; the filters after it run in fair turns.
            _admission(admission or AdmissionConfig(), audit_budget, legacy_error_code),
            AddressRewriteFilter(listeners),
            TopicPolicyFilter(policy, facts, recorder, legacy_error_code, locks),
            AutoCreateGuardFilter(policy, facts, recorder, max_entries_per_request, locks),
            # A topology's elements in all, bounded as a guarded request's are.
            StreamsTopologyFilter(
                policy, facts, recorder, ELEMENTS_PER_ENTRY * max_entries_per_request, locks
            ),
            AdminApiFilter(policy, recorder),
        ]
    )


def _admission(
    config: AdmissionConfig, budget: AuditBudget | None, legacy_error_code: int
) -> AdmissionFilter:
    return AdmissionFilter(
        concurrent=config.concurrent_judgements,
        entries_per_second=config.entries_per_second,
        burst=config.burst,
        legacy_error_code=legacy_error_code,
        budget=budget,
    )
