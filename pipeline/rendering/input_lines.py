"""What every page over audit lines shows of the lines that are not events, the same way.

Report and replay read the same input and count its lines alike (`line_summary`): their pages
show those counts as key figures and the bad lines in one table, by file and reason: the
largest groups only (the `bad_lines` table has them all), each with its first line number and
a sample where the input kept them, its file by name (the whole URI on pointing at it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kafka_policy_proxy.pipeline.rendering.html_page import Cell, Table, Text, filled_columns

BAD_LINE_ROWS = 10
SAMPLE_CHARS = 120


def line_figures(lines: Mapping[str, Any]) -> list[tuple[str, Cell]]:
    """The key figures of a `line_summary`: malformed, blank, unknown schema versions."""
    return [
        ("malformed lines", lines["malformed"]),
        ("blank lines", lines["blank"]),
        ("unknown schema versions", lines["unknown_version"]),
    ]


def bad_lines_table(rows: Sequence[Mapping[str, Any]]) -> Table:
    """The largest `bad_lines` groups (source, kind, problem, lines; first_line and sample
    when the input has them) as the page's table of them, saying how many are left out."""
    ordered = sorted(rows, key=lambda r: (-r["lines"], r["source"], r["kind"], r["problem"]))
    shown, rest = ordered[:BAD_LINE_ROWS], ordered[BAD_LINE_ROWS:]
    note = ""
    if rest:
        lines = sum(r["lines"] for r in rest)
        note = (
            f"The {BAD_LINE_ROWS} largest groups; and {len(rest):,} more "
            f"({lines:,} lines): all in bad_lines/."
        )
    columns, cells = filled_columns(
        ["file", "kind", "reason", "lines", "first line", "sample"],
        [
            [
                short_uri(r["source"]),
                r["kind"],
                r["problem"],
                r["lines"],
                r.get("first_line"),  # absent from the bad lines of old lakes
                _sample(r.get("sample")),
            ]
            for r in shown
        ],
    )
    return Table(
        "Lines that are not events, by file and reason",
        columns,
        cells,
        "every line is an event",
        note=note,
        key="bad-lines",
    )


def short_uri(uri: str) -> Text:
    """A file URI as its last two path segments; the whole URI on hover."""
    parts = [p for p in uri.split("/") if p]
    short = "/".join(parts[-2:]) if len(parts) > 2 else uri
    return Text(short if short == uri else "…/" + short, "", uri)


def _sample(sample: str | None) -> Text | None:
    if not sample:
        return None
    cut = sample if len(sample) <= SAMPLE_CHARS else sample[: SAMPLE_CHARS - 1] + "…"
    return Text(cut, "code", sample)
