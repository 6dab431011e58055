"""The audit sink: each decision record as one JSON line, to a rotated file and/or stdout.

The records themselves are built by `policy.decision_log` (schema in docs/audit-log.md).
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kafka_policy_proxy.proxy.metrics import AUDIT_EVENTS


class AuditLog:
    """Writes decision records to a rotated file and/or stdout, never through the app log; an
    AuditSink."""

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
        self._written = [
            AUDIT_EVENTS.labels(
                sink="stdout" if h.stream is sys.stdout else "file", result="written"
            )
            for h in self._handlers
            if isinstance(h, logging.StreamHandler)
        ]
        for handler in self._handlers:
            handler.setFormatter(logging.Formatter("%(message)s"))
            self._logger.addHandler(handler)

    @property
    def enabled(self) -> bool:
        """Whether records go anywhere."""
        return bool(self._handlers)

    def write(self, record: Mapping[str, Any]) -> None:
        """Write one complete record as a JSON line."""
        if self._handlers:
            self._logger.info(json.dumps(record, separators=(",", ":"), default=str))
            for counter in self._written:
                counter.inc()

    async def close(self) -> None:
        """Flush and close the outputs."""
        for handler in self._handlers:
            self._logger.removeHandler(handler)
            handler.close()
        self._handlers.clear()
