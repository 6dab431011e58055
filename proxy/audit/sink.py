"""What every audit sink offers the recorder (OPA's decision-log Logger is the model): one
protocol for the file, stdout and the audit topic alike."""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Any, Protocol


class AuditDeliveryError(Exception):
    """A decision record did not reach a sink that delivers later (the audit topic)."""


class AuditSink(Protocol):
    """Where decision records go."""

    @property
    def enabled(self) -> bool:
        """Whether records written here go anywhere."""
        ...

    def write(self, record: Mapping[str, Any]) -> Awaitable[None] | None:
        """Write one complete record: None once written, or its delivery, which fails with
        AuditDeliveryError if the record is lost."""
        ...

    async def close(self) -> None:
        """Write or deliver what is pending (bounded), then stop."""
        ...
