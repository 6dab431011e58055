"""What every page over audit lines shows of the lines that are not events, the same way.

Report and replay read the same input and count its lines alike (`line_summary`): their pages
show those counts as key figures and the bad lines in one table, by file and reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kafka_policy_proxy.pipeline.rendering.html_page import Cell, Table


def line_figures(lines: Mapping[str, Any]) -> list[tuple[str, Cell]]:
    """The key figures of a `line_summary`: malformed, blank, unknown schema versions."""
    return [
        ("malformed lines", lines["malformed"]),
        ("blank lines", lines["blank"]),
        ("unknown schema versions", lines["unknown_version"]),
    ]


def bad_lines_table(rows: Sequence[Mapping[str, Any]]) -> Table:
    """The `bad_lines` rows (source, kind, problem, lines) as the page's table of them."""
    return Table(
        "Lines that are not events, by file and reason",
        ["file", "kind", "reason", "lines"],
        [[r["source"], r["kind"], r["problem"], r["lines"]] for r in rows],
        "every line is an event",
    )
