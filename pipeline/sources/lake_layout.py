"""The audit lake's directory layout, shared by the Spark ingest and the id lookup (no Spark).

`table=events/date=YYYY-MM-DD/batch=B/` holds the good events by the UTC date of their `time`,
`table=quarantine/...` the lines that are not, and `_manifest/B.json` commits batch B
(`pipeline.sources.lake`).
"""

from __future__ import annotations

EVENTS = "events"
QUARANTINE = "quarantine"
MANIFEST = "_manifest"
