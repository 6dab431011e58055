"""The filter chain's assembly: which filters the proxy runs, and in which order."""

from __future__ import annotations

from collections.abc import Callable

from policy.engine import CompiledPolicy
from proxy.audit.recorder import DecisionRecorder
from proxy.cluster.live_facts import LiveFacts
from proxy.filters.address_rewrite import AddressRewriteFilter, BrokerListeners
from proxy.filters.admin_apis import AdminApiFilter
from proxy.filters.api_versions import ApiVersionsFilter
from proxy.filters.auto_create_guard import AutoCreateGuardFilter
from proxy.filters.chain import FilterChain
from proxy.filters.principal_capture import PrincipalCaptureFilter
from proxy.filters.topic_policy import TopicPolicyFilter


def proxy_chain(
    *,
    listeners: BrokerListeners,
    policy: Callable[[], CompiledPolicy | None],
    facts: LiveFacts,
    recorder: DecisionRecorder,
    legacy_error_code: int,
) -> FilterChain:
    """The proxy's filters in order; a request handled by several goes through each in turn."""
    return FilterChain(
        [
            ApiVersionsFilter(),
            PrincipalCaptureFilter(policy, recorder),
            AddressRewriteFilter(listeners),
            TopicPolicyFilter(policy, facts, recorder, legacy_error_code),
            AutoCreateGuardFilter(policy, facts, recorder),
            AdminApiFilter(policy, recorder),
        ]
    )
