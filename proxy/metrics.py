"""Every Prometheus metric the proxy exports (docs/operations.md lists them with their labels).

They live in the default registry. With several workers, PROMETHEUS_MULTIPROC_DIR is set
before this module is imported, and prometheus-client writes each worker's values to files
there, which the supervisor's /metrics adds up (hence no Info metric, and a mode per gauge).
"""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from kafka_policy_proxy.codec.errors import api_name

REQUESTS = Counter(
    "kpp_requests",
    "Requests from clients, by API",
    ["api", "api_key", "api_version"],
)
DECISIONS = Counter(
    "kpp_decisions",
    "Policy decisions per resource (a topic, a broker config), by the rule that decided",
    ["api", "action", "decision", "rule"],
)
ADDED_LATENCY = Histogram(
    "kpp_added_latency_seconds",
    "Time the proxy spends on a request before forwarding or answering it",
    ["api"],
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5),
)
CONNECTIONS_OPEN = Gauge(
    "kpp_connections_open",
    "Client connections open now, by listener",
    ["listener"],
    multiprocess_mode="livesum",
)
CONNECTIONS = Counter("kpp_connections", "Client connections accepted, by listener", ["listener"])
BYTES = Counter(
    "kpp_bytes", "Bytes proxied, by direction", ["direction"]
)  # client_to_broker | broker_to_client
CLUSTER_STATE_REQUESTS = Counter(
    "kpp_cluster_state_requests",
    "Cluster facts the policy needed: from the cache (hit), read (miss), or unreadable (error)",
    ["result"],
)
UPSTREAM_CONNECT_FAILURES = Counter(
    "kpp_upstream_connect_failures",
    "Client connections that could not reach their broker, by listener",
    ["listener"],
)
POLICY_RELOADS = Counter("kpp_policy_reloads", "Policy reloads, ok or failed", ["result"])
POLICY_INFO = Gauge(
    "kpp_policy_info",
    "1 for the revision of the policy in force",
    ["revision"],
    multiprocess_mode="livemax",
)
AUDIT_EVENTS = Counter(
    "kpp_audit_events",
    "Audit events by sink (file, stdout, kafka): written, or dropped",
    ["sink", "result"],
)
OVERSIZED_REQUESTS = Counter(
    "kpp_oversized_requests",
    "Guarded requests over limits.max_entries_per_request, by API: answered, or closed",
    ["api", "result"],
)
ADMISSION_THROTTLED = Counter(
    "kpp_admission_throttled",
    "Guarded requests throttled (rate: admission.entries_per_second) or refused (audit_budget)"
    ", by API",
    ["api", "reason"],
)
ADMISSION_QUEUE_DEPTH = Gauge(
    "kpp_admission_queue_depth",
    "Guarded requests waiting for their turn (admission.concurrent_judgements)",
    multiprocess_mode="livesum",
)
ADMISSION_TURN_WAIT = Histogram(
    "kpp_admission_turn_wait_seconds",
    "Time a guarded request waited for its turn",
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)

_live_revision: list[str] = []


def policy_revision(revision: str) -> None:
    """Mark `revision` as the policy in force (the one before drops to 0)."""
    for old in _live_revision:
        POLICY_INFO.labels(revision=old).set(0)  # what a worker's file keeps (multiprocess)
        POLICY_INFO.remove(old)
    _live_revision[:] = [revision]
    POLICY_INFO.labels(revision=revision).set(1)


_request_counters: dict[tuple[int, int], Any] = {}


def count_request(api_key: int, api_version: int) -> None:
    """Count one client request (the label children are cached: this is the hot path)."""
    child = _request_counters.get((api_key, api_version))
    if child is None:
        child = _request_counters[(api_key, api_version)] = REQUESTS.labels(
            api=api_name(api_key), api_key=str(api_key), api_version=str(api_version)
        )
    child.inc()
