"""One decision record found by its id, in audit files or in the audit lake, without Spark.

Files: the audit file the proxy writes, its rotations beside it (`audit.jsonl.1` the newest,
`.2`, ...: `proxy.audit.file_sink`), and under `--workers` each worker's file
(`audit.worker-N.jsonl`) with its rotations. Each line is matched as bytes first and parsed
only when it holds the id.

The lake (`pipeline.sources.lake`, local paths): only committed batches, and only the date
partitions the id's own time names (a UUIDv7 carries the millisecond it was minted, a moment
before its record's `time`), read with pyarrow, the id pushed down to each file's row-group
statistics. An id without a time (the version-4 ids of older records) is looked for in every
date. A summary record is found by its one id like any other.
"""

from __future__ import annotations

import glob
import json
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from kafka_policy_proxy.pipeline.sources.lake_layout import EVENTS, MANIFEST
from kafka_policy_proxy.policy.decision_ids import decision_time, is_time_ordered
from kafka_policy_proxy.policy.decision_log import V2_FIELDS, json_schema

# How far a record's `time` may lie from its id's: the clock read twice, or stepped back.
TIME_SLACK = timedelta(hours=1)
# Columns the lake adds to each event: where its line came from, and the partitions.
_LAKE_ONLY = ("source", "line", "kind", "problem", "sample", "table", "date", "batch")


@dataclass(frozen=True, slots=True)
class Lookup:
    """The record found (None if not), where, and everything searched."""

    record: dict[str, Any] | None = None
    found_in: str | None = None
    searched: list[str] = field(default_factory=list)


def id_texts(decision_id: uuid.UUID) -> tuple[str, ...]:
    """How a record may write this id: canonical text (UUIDv7 ids) or 32 hex digits (older)."""
    return (str(decision_id), decision_id.hex)


def audit_files(path: Path) -> list[Path]:
    """The audit file, its rotations, and each worker's file with its rotations: those that
    exist, each file before its rotations, the newest first."""
    workers = sorted(
        path.parent.glob(f"{glob.escape(path.stem)}.worker-*{glob.escape(path.suffix)}"),
        key=_worker_number,
    )
    found = []
    for base in (path, *workers):
        if base.is_file():
            found.append(base)
        found.extend(_rotations(base))
    return found


def _rotations(base: Path) -> list[Path]:
    pattern = re.compile(re.escape(base.name) + r"\.(\d+)")
    numbered = [
        (int(m.group(1)), p)
        for p in base.parent.glob(f"{glob.escape(base.name)}.*")
        if (m := pattern.fullmatch(p.name)) and p.is_file()
    ]
    return [p for _, p in sorted(numbered)]


def _worker_number(path: Path) -> int:
    found = re.search(r"\.worker-(\d+)", path.name)
    return int(found.group(1)) if found else -1


def find_in_files(decision_id: uuid.UUID, paths: Iterable[Path]) -> Lookup:
    """The first record with this id in these audit files (each with its rotations and its
    workers' files)."""
    texts = id_texts(decision_id)
    needles = [t.encode() for t in texts]
    searched = []
    for given in paths:
        files = audit_files(given)
        if not files:
            searched.append(f"{given} (no such file)")
        for path in files:
            searched.append(str(path))
            with path.open("rb") as lines:
                for number, line in enumerate(lines, 1):
                    if not any(n in line for n in needles):
                        continue
                    try:
                        record = json.loads(line)
                    except ValueError:
                        continue  # the id inside a line that is not a record
                    if isinstance(record, dict) and record.get("decision_id") in texts:
                        return Lookup(record, f"{path}:{number}", searched)
    return Lookup(searched=searched)


def lake_dates(decision_id: uuid.UUID) -> list[date] | None:
    """The UTC dates whose partitions can hold this id's record; None: any date."""
    if not is_time_ordered(decision_id):
        return None
    minted = decision_time(decision_id)
    first, last = (minted - TIME_SLACK).date(), (minted + TIME_SLACK).date()
    return [first + timedelta(days=n) for n in range((last - first).days + 1)]


def find_in_lake(decision_id: uuid.UUID, lake: str) -> Lookup:
    """The record with this id in the lake's committed batches, reading only the date
    partitions its time names."""
    import pyarrow.parquet as pq  # type: ignore[import-untyped]  # only when a lake is searched

    root = _local(lake)
    batches = _committed(root)
    dates = lake_dates(decision_id)
    events = root / f"table={EVENTS}"
    if dates is None:
        partitions = sorted(events.glob("date=*"))
    else:
        partitions = [events / f"date={d.isoformat()}" for d in dates]
    searched = [f"{lake} (no committed batch)"] if not batches else []
    texts = list(id_texts(decision_id))
    for partition in partitions if batches else []:
        searched.append(str(partition))
        for batch in sorted(batches):
            for file in sorted((partition / f"batch={batch}").glob("*.parquet")):
                table = pq.read_table(file, filters=[("decision_id", "in", texts)])
                if table.num_rows:
                    row = table.slice(0, 1).to_pylist()[0]
                    where = f"{file} (from {row.get('source')} line {row.get('line')})"
                    return Lookup(_as_record(row), where, searched)
    return Lookup(searched=searched)


def _local(lake: str) -> Path:
    parsed = urlparse(lake)
    if parsed.scheme not in ("", "file"):
        raise ValueError(f"{lake}: audit show reads a lake on a local file system only")
    return Path(parsed.path if parsed.scheme else lake)


def _committed(root: Path) -> set[str]:
    """The batches whose manifests are written: the only ones readers count."""
    names = set()
    for manifest in (root / MANIFEST).glob("*.json"):
        try:
            names.add(json.loads(manifest.read_text())["batch"])
        except (ValueError, KeyError):
            continue  # cut short while being written: never committed
    return names


def _as_record(row: dict[str, Any]) -> dict[str, Any]:
    """A lake row as the record it was: the event's fields in the schema's order, its time
    in RFC 3339, and the optional fields it did not have left out."""
    schema = json_schema()
    kept = set(schema.get("required", ())) | set(V2_FIELDS)
    record = {}
    for name in schema["properties"]:
        if name in _LAKE_ONLY or name not in row:
            continue
        value = row[name]
        if value is None and name not in kept:
            continue
        if isinstance(value, datetime):
            value = _rfc3339(value)
        elif isinstance(value, str) and _free_form(schema["properties"][name]):
            value = json.loads(value)  # kept as JSON text (`request`, `rewritten`)
        record[name] = value
    return record


def _free_form(prop: dict[str, Any]) -> bool:
    """Whether a field is an object of no fixed properties, which the lake keeps as text."""
    shapes = prop.get("anyOf", [prop])
    return any(s.get("type") == "object" and "properties" not in s for s in shapes)


def _rfc3339(moment: datetime) -> str:
    utc = moment.astimezone(UTC) if moment.tzinfo else moment
    return utc.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
