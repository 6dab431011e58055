"""The audit log: one JSON line per policy decision (schema in docs/audit-log.md)."""

from __future__ import annotations

import json
import logging
import logging.handlers
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from policy.model import Decision, TopicRequest

SCHEMA_VERSION = 1


def outcome(decision: Decision) -> str:
    """The event's `decision` field: allowed, denied or audit-would-deny."""
    if not decision.allowed:
        return "denied"
    return "audit-would-deny" if decision.violations else "allowed"


def decision_event(
    request: TopicRequest,
    decision: Decision,
    *,
    conn: int,
    client: str,
    api: str,
    api_key: int,
    api_version: int,
) -> dict[str, Any]:
    """One decision as an audit event, without the time and schema stamps `emit` adds."""
    return {
        "event": "decision",
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
        "decision": outcome(decision),
        "mode": decision.mode.value,
        "violations": [v.to_dict() for v in decision.violations],
        "request": request.to_dict(),
    }


class AuditLog:
    """Writes decision events to a rotated file and/or stdout, never through the app log."""

    def __init__(
        self,
        file: Path | None = None,
        *,
        stdout: bool = False,
        max_bytes: int = 100 * 1024 * 1024,
        backups: int = 5,
    ) -> None:
        self._logger = logging.getLogger(f"kafka_policy_proxy.audit.{id(self)}")
        self._logger.propagate = False
        self._logger.setLevel(logging.INFO)
        self._handlers: list[logging.Handler] = []
        if file is not None:
            file.parent.mkdir(parents=True, exist_ok=True)
            self._handlers.append(
                logging.handlers.RotatingFileHandler(
                    file, maxBytes=max_bytes, backupCount=backups, encoding="utf-8"
                )
            )
        if stdout:
            self._handlers.append(logging.StreamHandler(sys.stdout))
        for handler in self._handlers:
            handler.setFormatter(logging.Formatter("%(message)s"))
            self._logger.addHandler(handler)

    @property
    def enabled(self) -> bool:
        """Whether events go anywhere."""
        return bool(self._handlers)

    def emit(self, event: Mapping[str, Any]) -> None:
        """Write one event as a JSON line, stamped with the time and the schema version."""
        if self._handlers:
            record = {"time": _now(), "schema": SCHEMA_VERSION, **event}
            self._logger.info(json.dumps(record, separators=(",", ":"), default=str))

    def close(self) -> None:
        """Flush and close the outputs."""
        for handler in self._handlers:
            self._logger.removeHandler(handler)
            handler.close()
        self._handlers.clear()


def _now() -> str:
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"
