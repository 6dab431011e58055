"""Self-contained HTML pages: key figures, notes, tables and charts, the PNGs inlined as data URIs.

A `Page` is data; `page_files` turns it into the files a job writes beside its tables: the
HTML document (no external references, so it can be mailed as it is) and each chart as a PNG
file of its own. Nothing here reads or writes files.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

Cell = str | int | float | None


@dataclass(frozen=True)
class Table:
    """A titled table; `rows` are already in display order."""

    title: str
    columns: Sequence[str]
    rows: Sequence[Sequence[Cell]]
    empty: str = "nothing to show"


@dataclass(frozen=True)
class Chart:
    """A titled PNG chart."""

    title: str
    png: bytes


@dataclass(frozen=True)
class Page:
    """A page: key figures first, then notes, then charts and tables in order."""

    title: str
    figures: Sequence[tuple[str, Cell]] = ()
    notes: Sequence[str] = ()
    parts: Sequence[Table | Chart] = field(default_factory=list)


def utc(moment: datetime | None) -> str | None:
    """A time as pages show it: to the second, in UTC, saying so."""
    return None if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def percent(part: float, whole: float) -> str:
    """`part` as a share of `whole`, for a cell."""
    return "-" if not whole else f"{100 * part / whole:.1f}%"


def with_share(count: int, total: int) -> str:
    """A count and its share of `total`: `1,234 (5.6%)`."""
    return f"{count:,} ({percent(count, total)})"


def page_files(name: str, page: Page) -> dict[str, bytes]:
    """`name`.html and the page's charts as PNG files beside it, by file name."""
    charts = [p for p in page.parts if isinstance(p, Chart)]
    files = {
        f"{name}-{i}-{re.sub(r'[^a-z0-9]+', '-', c.title.lower()).strip('-')[:40]}.png": c.png
        for i, c in enumerate(charts, 1)
    }
    files[f"{name}.html"] = render(page).encode("utf-8")
    return files


def render(page: Page) -> str:
    """The page as one HTML document with no external references."""
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(page.title)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{_e(page.title)}</h1>",
    ]
    if page.figures:
        out.append('<dl class="figures">')
        out.extend(f"<div><dt>{_e(k)}</dt><dd>{_cell(v)}</dd></div>" for k, v in page.figures)
        out.append("</dl>")
    out.extend(f"<p>{_e(note)}</p>" for note in page.notes)
    for part in page.parts:
        out.append(f"<h2>{_e(part.title)}</h2>")
        if isinstance(part, Chart):
            data = base64.b64encode(part.png).decode("ascii")
            out.append(f'<img alt="{_e(part.title)}" src="data:image/png;base64,{data}">')
        elif not part.rows:
            out.append(f'<p class="empty">{_e(part.empty)}</p>')
        else:
            out.append("<table><thead><tr>")
            out.extend(f"<th>{_e(c)}</th>" for c in part.columns)
            out.append("</tr></thead><tbody>")
            for row in part.rows:
                out.append("<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>")
            out.append("</tbody></table>")
    out.append("</body></html>")
    return "\n".join(out)


def _cell(value: Cell) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return _e(value)


def _e(text: str) -> str:
    return html.escape(text, quote=True)


_CSS = (
    "body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:70em}"
    "table{border-collapse:collapse;margin:1em 0}"
    "th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}"
    "th{background:#f3f3f3}td{font-variant-numeric:tabular-nums}"
    ".figures{display:flex;flex-wrap:wrap;gap:1.5em}.figures dt{color:#666;font-size:.85em}"
    ".figures dd{margin:0;font-size:1.4em;font-weight:600}.empty{color:#666;font-style:italic}"
    "img{max-width:100%}"
)
