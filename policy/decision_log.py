"""The decision record: one audit event per judged topic, its schema owned here and only here.

The same record goes to the audit file, stdout and the Parquet lake (docs/audit-log.md). The
pipeline derives its Spark schema from `json_schema()`; nothing else types these fields again.
"""

from __future__ import annotations

import hashlib
import uuid
from enum import StrEnum
from typing import Any

from policy.model import Decision, TopicRequest

SCHEMA_VERSION = 2
# Versions the readers still accept: v1 events lack the four trace fields.
READABLE_VERSIONS = (1, 2)
EVENT_KIND = "decision"


class Outcome(StrEnum):
    """The record's `decision` field."""

    ALLOWED = "allowed"
    DENIED = "denied"
    AUDIT_WOULD_DENY = "audit-would-deny"


# What went through the proxy: an audit-mode violation does not stop a request.
PASSED = frozenset({Outcome.ALLOWED, Outcome.AUDIT_WOULD_DENY})


def outcome(decision: Decision) -> Outcome:
    """allowed, denied, or audit-would-deny (allowed, with audit-mode violations)."""
    if not decision.allowed:
        return Outcome.DENIED
    return Outcome.AUDIT_WOULD_DENY if decision.violations else Outcome.ALLOWED


def new_decision_id() -> str:
    """A fresh, unique decision id."""
    return uuid.uuid4().hex


def policy_revision(text: str | bytes) -> str:
    """The content hash that names a policy revision: `sha256:` and 16 hex digits."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    return "sha256:" + hashlib.sha256(data).hexdigest()[:16]


def decision_record(
    request: TopicRequest,
    decision: Decision,
    *,
    time: str,
    decision_id: str,
    policy_revision: str,
    cluster_id: str | None,
    proxy_id: str,
    conn: int,
    client: str,
    api: str,
    api_key: int,
    api_version: int,
) -> dict[str, Any]:
    """One decision as a complete audit record (`time` is RFC 3339 UTC, microseconds)."""
    return {
        "time": time,
        "schema": SCHEMA_VERSION,
        "event": EVENT_KIND,
        "decision_id": decision_id,
        "policy_revision": policy_revision,
        "cluster_id": cluster_id,
        "proxy_id": proxy_id,
        "conn": conn,
        "client": client,
        "principal": request.principal.name,
        "client_id": request.principal.client_id,
        "api": api,
        "api_key": api_key,
        "api_version": api_version,
        "action": request.action.value,
        "topic": decision.topic,
        "validate_only": request.validate_only,
        "decision": outcome(decision).value,
        "mode": decision.mode.value,
        "violations": [v.to_dict() for v in decision.violations],
        "request": request.to_dict(),
    }
