"""The audit sink: each decision record as one JSON line, to a rotated file and/or stdout.

The file rotates at `max_bytes`, keeping `backups` old files (file.1 the newest), but never
deletes history younger than `min_retention_s`: when rotating would delete such a backup (a
flood), it does not rotate, alerts (kpp_audit_rotation_pressure, an error in the log) and
keeps appending to the current file until all the files hold `max_total_bytes`; beyond that,
records are refused (kpp_audit_events{result="dropped"}), which with audit.on_failure: closed
refuses the mutation. Disk use is thus at most `max_total_bytes` plus one record.

The records themselves are built by `policy.decision_log` (schema in docs/audit-log.md).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Generator, Mapping
from pathlib import Path
from typing import IO, Any

import structlog

from kafka_policy_proxy.proxy.audit.sink import AuditDeliveryError
from kafka_policy_proxy.proxy.metrics import AUDIT_BYTES, AUDIT_EVENTS, AUDIT_ROTATION_PRESSURE

log = structlog.get_logger("proxy.audit.file_sink")

# Under pressure, the oldest backup's age is looked at again at most this often.
_RECHECK_S = 1.0


class Refused:
    """An awaitable that fails with the reason a record was not kept; nobody need await it."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __await__(self) -> Generator[Any, None, None]:
        raise AuditDeliveryError(self.reason)
        yield  # a generator, so that awaiting it runs the raise


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
        min_retention_s: float = 3600.0,
        max_total_bytes: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`max_total_bytes` None: `max_bytes * (backups + 2)`."""
        self._file = file
        self._max_bytes = max_bytes
        self._backups = backups
        self._min_retention_s = min_retention_s
        self._max_total = max_total_bytes or max_bytes * (backups + 2)
        self._clock = clock
        self._stream: IO[bytes] | None = None
        self._size = 0  # of the current file
        self._backup_bytes = 0  # of the backups, as of the last rotation
        self._opened_at = 0.0
        self._pressure_until = 0.0  # no rotation is tried again before
        self._stdout = stdout
        if file is not None:
            file.parent.mkdir(parents=True, exist_ok=True)
            self._open()
            self._backup_bytes = sum(_size(self._backup(i)) for i in range(1, backups + 1))
        self._file_written = AUDIT_EVENTS.labels(sink="file", result="written")
        self._file_dropped = AUDIT_EVENTS.labels(sink="file", result="dropped")
        self._file_bytes = AUDIT_BYTES.labels(sink="file")
        self._stdout_written = AUDIT_EVENTS.labels(sink="stdout", result="written")
        self._stdout_bytes = AUDIT_BYTES.labels(sink="stdout")

    @property
    def enabled(self) -> bool:
        """Whether records go anywhere."""
        return self._file is not None or self._stdout

    def write(self, record: Mapping[str, Any]) -> Refused | None:
        """Write one complete record as a JSON line; a Refused if the file could not keep it."""
        text = json.dumps(record, separators=(",", ":"), default=str) + "\n"
        line = text.encode()
        if self._stdout:
            sys.stdout.write(text)  # whatever sys.stdout is now (a test may capture it)
            sys.stdout.flush()
            self._stdout_written.inc()
            self._stdout_bytes.inc(len(line))
        if self._file is None:
            return None
        refused = self._room_for(len(line))
        if refused is None:
            try:
                assert self._stream is not None
                self._stream.write(line)
            except OSError as exc:
                refused = f"audit file {self._file}: {exc}"
        if refused is not None:
            self._file_dropped.inc()
            return Refused(refused)
        self._size += len(line)
        self._file_written.inc()
        self._file_bytes.inc(len(line))
        return None

    def _room_for(self, nbytes: int) -> str | None:
        """None if a record of `nbytes` may be written now (rotating first if due), else why not."""
        if self._size + nbytes <= self._max_bytes or self._size == 0:
            return None
        now = self._clock()
        if now >= self._pressure_until:
            age = now - self._oldest_kept()
            if age >= self._min_retention_s:
                self._rotate(now)
                return None
            self._pressure_until = now + _RECHECK_S
            AUDIT_ROTATION_PRESSURE.inc()
            log.error(
                "audit rotation under pressure: not deleting history younger than "
                "audit.min_retention_s",
                file=str(self._file),
                oldest_age_s=round(age, 1),
                min_retention_s=self._min_retention_s,
            )
        if self._backup_bytes + self._size + nbytes <= self._max_total:
            return None
        return (
            f"audit file {self._file}: audit.max_total_bytes ({self._max_total}) reached and "
            f"its history is younger than audit.min_retention_s ({self._min_retention_s:g} s)"
        )

    def _oldest_kept(self) -> float:
        """When the history that rotating now would delete was last written."""
        if self._backups == 0:
            return self._opened_at  # the current file itself is what goes
        try:
            return os.stat(self._backup(self._backups)).st_mtime
        except FileNotFoundError:
            return float("-inf")  # nothing to delete yet

    def _rotate(self, now: float) -> None:
        assert self._file is not None and self._stream is not None
        self._stream.close()
        if self._backups > 0:
            for i in range(self._backups - 1, 0, -1):
                if self._backup(i).exists():
                    os.replace(self._backup(i), self._backup(i + 1))
            os.replace(self._file, self._backup(1))
            self._backup_bytes = sum(_size(self._backup(i)) for i in range(1, self._backups + 1))
        else:
            self._file.unlink()
        self._open()

    def _open(self) -> None:
        assert self._file is not None
        # Unbuffered: each record reaches the file whole or fails whole, nothing lingers.
        self._stream = open(self._file, "ab", buffering=0)  # noqa: SIM115 - closed in close()
        self._size = self._stream.tell()
        self._opened_at = self._clock()

    def _backup(self, index: int) -> Path:
        assert self._file is not None
        return self._file.with_name(f"{self._file.name}.{index}")

    async def close(self) -> None:
        """Flush and close the outputs."""
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        self._file = None
        self._stdout = False


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
