"""Every Prometheus metric the proxy exports (docs/operations.md lists them with their labels).

They live in the default registry. With several workers, PROMETHEUS_MULTIPROC_DIR is set
before this module is imported, and prometheus-client writes each worker's values to files
there, which the supervisor's /metrics adds up (hence no Info metric, and a mode per gauge).
"""

from __future__ import annotations

import functools
import platform
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from kafka_policy_proxy import __version__
from kafka_policy_proxy.codec.api_versions import proxy_range
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
SPLICED_BYTES = Counter(
    "kpp_spliced_bytes",
    "Of kpp_bytes, those moved by splice (net.splice), by direction",
    ["direction"],
)
CLUSTER_STATE_REQUESTS = Counter(
    "kpp_cluster_state_requests",
    "Cluster facts the policy needed: from the cache (hit), read (miss), or unreadable (error)",
    ["result"],
)
CLUSTER_STATE_READS = Counter(
    "kpp_cluster_state_reads",
    "Requests the proxy sent to read cluster state, by API",
    ["api"],
)  # Metadata | DescribeConfigs | other
CLUSTER_STATE_READ_KEYS = Counter(
    "kpp_cluster_state_read_keys",
    "Topics, topic ids or config resources those requests named (all topics counts as one)",
    ["api"],
)  # Metadata | DescribeConfigs | other
CLUSTER_STATE_IDS_NOT_READ = Counter(
    "kpp_cluster_state_ids_not_read",
    "Topic ids answered UNKNOWN_TOPIC_ID without a read, by why",
    ["reason"],
)  # over_cap | known_unknown
OAUTH_TOKEN_FETCHES = Counter(
    "kpp_oauth_token_fetches",
    "OAUTHBEARER tokens the proxy asked its token endpoint for, ok or failed",
    ["result"],
)  # ok | error
OAUTH_TOKEN_EXPIRY = Gauge(
    "kpp_oauth_token_expiry_timestamp_seconds",
    "Expiry (Unix time) of the OAUTHBEARER token the proxy's own connections use",
    multiprocess_mode="livemin",  # the worker whose token expires first
)
SASL_REAUTHENTICATIONS = Counter(
    "kpp_cluster_state_reauthentications",
    "KIP-368 re-authentications of the proxy's own connections before the broker's session "
    "expiry, ok or failed",
    ["result"],
)  # ok | error
PROXY_PROTOCOL_REJECTED = Counter(
    "kpp_proxy_protocol_rejected",
    "Connections closed on a listener with proxy_protocol: required, by why",
    ["reason"],
)  # no_header | malformed | unsupported | timeout | incomplete | peer
UPSTREAM_CONNECT_FAILURES = Counter(
    "kpp_upstream_connect_failures",
    "Client connections that could not reach their broker, by listener",
    ["listener"],
)
POLICY_RELOADS = Counter("kpp_policy_reloads", "Policy reloads, ok or failed", ["result"])
POLICY_RELOAD_SUCCESS_TIME = Gauge(
    "kpp_policy_reload_last_success_timestamp_seconds",
    "When (Unix time) the policy in force was loaded: at start, or by the last reload that "
    "succeeded",
    multiprocess_mode="livemin",  # the worker that is furthest behind
)
POLICY_RELOAD_SUCCESSFUL = Gauge(
    "kpp_policy_last_reload_successful",
    "1 if the last load of the policy file succeeded, 0 while a refused file is in place",
    multiprocess_mode="livemin",
)
TLS_RELOADS = Counter(
    "kpp_tls_reloads",
    "TLS certificate reloads (a file changed, or SIGHUP), ok or failed, by side",
    ["side", "result"],
)  # side: listener | sni | upstream; result: ok | failed
TLS_CERTIFICATE_EXPIRY = Gauge(
    "kpp_tls_certificate_expiry_timestamp_seconds",
    "notAfter of the certificate in use (Unix time), by side: alert well before it",
    ["side"],
    multiprocess_mode="min",
)  # side: listener | sni | upstream
SNI_REFUSED = Counter(
    "kpp_sni_refused",
    "TLS handshakes on the SNI port refused with unrecognized_name, by reason",
    ["reason"],
)  # no_sni | unknown_name
POLICY_INFO = Gauge(
    "kpp_policy_info",
    "1 for the revision of the policy in force",
    ["revision"],
    multiprocess_mode="livemax",
)
EXCEPTIONS_IN_FORCE = Gauge(
    "kpp_policy_exceptions_in_force",
    "Exceptions of the policy in force that waive now (not yet expired)",
    multiprocess_mode="livemax",
)
WAIVERS = Counter(
    "kpp_policy_waivers",
    "Decisions in which an exception waived a violation, by exception (the policy's names)",
    ["exception"],
)
EXCEPTION_EXPIRY = Gauge(
    "kpp_policy_exception_expiry_seconds",
    "Seconds until each exception of the policy in force expires (negative: expired)",
    ["exception"],
    multiprocess_mode="livemin",
)
AUDIT_EVENTS = Counter(
    "kpp_audit_events",
    "Audit events by sink (file, stdout, kafka): written, or dropped",
    ["sink", "result"],
)
AUDIT_BYTES = Counter(
    "kpp_audit_bytes", "Bytes of audit records written, by sink (file, stdout, kafka)", ["sink"]
)
AUDIT_ROTATION_PRESSURE = Counter(
    "kpp_audit_rotation_pressure",
    "Rotations the audit file refused: its oldest backup is younger than audit.min_retention_s",
)
AUDIT_BUDGET_DENIALS = Counter(
    "kpp_audit_budget_denials",
    "Guarded requests refused: their principal spent audit.principal_budget_bytes_per_minute",
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
BUDGET_TURN_WAIT = Histogram(
    "kpp_budget_turn_wait_seconds",
    "Time a budget-affecting request waited for its budgets' turn (policy budgets)",
    buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
BUDGET_USAGE = Gauge(
    "kpp_budget_usage",
    "A budget's usage after the last request judged against it (budgets keyed by topic "
    "scope; a per-principal budget has no single usage)",
    ["budget", "unit"],
    multiprocess_mode="max",
)
ADMISSION_TURN_WAIT = Histogram(
    "kpp_admission_turn_wait_seconds",
    "Time a guarded request waited for its turn",
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
MEMORY_PAUSED = Gauge(
    "kpp_memory_paused_connections",
    "Client connections not read for memory, by why: the process-wide budget "
    "(limits.max_buffered_bytes) or their own cap (limits.max_connection_buffered_bytes)",
    ["reason"],
    multiprocess_mode="livesum",
)  # budget | connection_cap
MEMORY_CLOSES = Counter(
    "kpp_memory_closed_connections",
    "Client connections closed to bound memory, by why: a request over "
    "limits.max_judged_request_bytes, or stalled while the budget was exhausted",
    ["reason"],
)  # judged_request_too_large | stalled
BUFFERED_BYTES = Gauge(
    "kpp_buffered_bytes",
    "Bytes charged to the memory budget: buffered, and reserved for request frames being read",
    multiprocess_mode="livesum",
)

BUILD_INFO = Gauge(
    "kpp_build_info",
    "Always 1; the labels say which version of the proxy runs, on which Python",
    ["version", "python"],
    multiprocess_mode="livemax",
)
BUILD_INFO.labels(version=__version__, python=platform.python_version()).set(1)

_live_revision: list[str] = []


def policy_revision(revision: str) -> None:
    """Mark `revision` as the policy in force (the one before drops to 0)."""
    for old in _live_revision:
        POLICY_INFO.labels(revision=old).set(0)  # what a worker's file keeps (multiprocess)
        POLICY_INFO.remove(old)
    _live_revision[:] = [revision]
    POLICY_INFO.labels(revision=revision).set(1)


_live_exceptions: set[str] = set()


def policy_exceptions(expiries: Iterable[tuple[str, datetime]], now: datetime) -> None:
    """Set the exception gauges for the policy in force at `now` (its names and expiries);
    those of a replaced policy's exceptions drop out (NaN in a worker's file, then removed)."""
    current = dict(expiries)
    for gone in _live_exceptions - current.keys():
        EXCEPTION_EXPIRY.labels(exception=gone).set(float("nan"))
        EXCEPTION_EXPIRY.remove(gone)
    for name, expires in current.items():
        EXCEPTION_EXPIRY.labels(exception=name).set((expires - now).total_seconds())
    _live_exceptions.clear()
    _live_exceptions.update(current)
    EXCEPTIONS_IN_FORCE.set(sum(1 for expires in current.values() if now < expires))


def count_waivers(exceptions: Iterable[str]) -> None:
    """Count one decision for each exception that waived something in it."""
    for name in dict.fromkeys(exceptions):
        WAIVERS.labels(exception=name).inc()


_request_counters: dict[tuple[int, int], Any] = {}
OTHER = "other"


def count_request(api_key: int, api_version: int) -> None:
    """Count one client request (the label children are cached: this is the hot path).

    The labels come from bounded sets: a key the proxy does not handle, or a version outside
    the range it handles for that key, counts under `other`, so a client sending random keys
    and versions cannot grow the label sets (nor this cache).
    """
    child = _request_counters.get((api_key, api_version))
    if child is None:
        child = _request_child(api_key, api_version)
    child.inc()


def _request_child(api_key: int, api_version: int) -> Any:
    span = proxy_range(api_key)
    if span is None:
        return _request_other(OTHER, OTHER)
    if not span[0] <= api_version <= span[1]:
        return _request_other(api_name(api_key), str(api_key))
    child = _request_counters[(api_key, api_version)] = REQUESTS.labels(
        api=api_name(api_key), api_key=str(api_key), api_version=str(api_version)
    )
    return child


@functools.cache
def _request_other(api: str, api_key: str) -> Any:
    """The one child per known key (or for every unknown key) counting other versions."""
    return REQUESTS.labels(api=api, api_key=api_key, api_version=OTHER)
