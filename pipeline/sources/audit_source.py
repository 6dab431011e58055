"""What a job reads: raw audit files for a one-off run, or the audit lake."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import SparkSession

from kafka_policy_proxy.pipeline.sources.audit_events import AuditInput, read_audit
from kafka_policy_proxy.pipeline.sources.lake import read_lake


@dataclass(frozen=True)
class AuditSource:
    """What a job reads: raw audit files (`paths`) or a lake."""

    paths: Sequence[str] = ()
    lake: str | None = None

    def read(self, spark: SparkSession, *, with_request: bool = True) -> AuditInput:
        """Every line of the input."""
        if self.lake is not None:
            return read_lake(spark, self.lake, with_request=with_request)
        return read_audit(spark, self.paths, with_request=with_request)

    @property
    def label(self) -> str:
        """The input as a report names it."""
        return f"the lake {self.lake}" if self.lake is not None else ", ".join(self.paths)


def as_source(audit: AuditSource | Sequence[str]) -> AuditSource:
    """A job's input: a source as it is, or raw audit paths."""
    return audit if isinstance(audit, AuditSource) else AuditSource(paths=tuple(audit))
