"""Finding one decision record by its id in audit JSONL files (`policy except`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def find_record(decision_id: str, files: Sequence[Path]) -> dict[str, Any] | None:
    """The record with this decision id in the first file holding it, else None; lines that
    are not JSON objects are skipped (a torn last line, a log line)."""
    for path in files:
        with path.open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                if decision_id not in line:
                    continue  # cheap: most lines are not the one
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(record, dict) and record.get("decision_id") == decision_id:
                    return record
    return None
