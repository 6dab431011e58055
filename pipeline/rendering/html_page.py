"""Self-contained HTML pages: key figures, notes, tables and charts, the PNGs inlined as data URIs.

A page's first section (a `Section`, say "What to act on") is what fits the first screen;
the `key` of a part is its element id, for links and for the browser test.

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


@dataclass(frozen=True)
class Text:
    """A cell's text drawn as `kind` (`msg`: a message, wrapped; `code`: a sample, cut on one
    line; `warn`),
    with `hover` shown on pointing at it (the full text of a shortened one)."""

    text: str
    kind: str = ""
    hover: str | None = None


Cell = str | int | float | Text | None
MESSAGE_CHARS = 110  # a message cell's text beyond this is cut, whole on hover


@dataclass(frozen=True)
class Table:
    """A titled table; `rows` are already in display order; `note` under the title says what
    was left out or how to read it."""

    title: str
    columns: Sequence[str]
    rows: Sequence[Sequence[Cell]]
    empty: str = "nothing to show"
    note: str = ""
    key: str = ""


@dataclass(frozen=True)
class Chart:
    """A titled PNG chart (the title is the page's heading, never drawn in the image too);
    `note` under it says how to read it: the scale, the partial periods."""

    title: str
    png: bytes
    note: str = ""
    key: str = ""


@dataclass(frozen=True)
class Note:
    """A paragraph among the parts; `kind` `warn` draws it as a call-out."""

    text: str
    kind: str = ""
    key: str = ""


@dataclass(frozen=True)
class Section:
    """A boxed group of parts under one heading: the first screen's "what to act on"."""

    title: str
    parts: Sequence[Table | Chart | Note]
    key: str = ""


Part = Table | Chart | Note | Section


@dataclass(frozen=True)
class Page:
    """A page: key figures first, then notes, then charts and tables in order."""

    title: str
    figures: Sequence[tuple[str, Cell]] = ()
    notes: Sequence[str] = ()
    parts: Sequence[Part] = field(default_factory=list)


def message(text: str | None) -> Cell:
    """A message for a cell (a violation's, say): wrapped, cut to a readable length, whole on
    pointing at it."""
    if not text:
        return None
    if len(text) <= MESSAGE_CHARS:
        return Text(text, "msg")
    return Text(text[: MESSAGE_CHARS - 1] + "…", "msg", text)


def filled_columns(
    columns: Sequence[str], rows: Sequence[Sequence[Cell]]
) -> tuple[list[str], list[list[Cell]]]:
    """The columns (and rows) without those no row fills: an always-empty column says nothing."""
    if not rows:
        return list(columns), []
    kept = [i for i in range(len(columns)) if any(row[i] not in (None, "") for row in rows)]
    return [columns[i] for i in kept], [[row[i] for i in kept] for row in rows]


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
    charts = [c for p in page.parts for c in _flat(p) if isinstance(c, Chart)]
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
        _part(out, part, "h2")
    out.append("</body></html>")
    return "\n".join(out)


def _flat(part: Part) -> Sequence[Part]:
    return part.parts if isinstance(part, Section) else [part]


def _part(out: list[str], part: Part, heading: str) -> None:
    key = f' id="{_e(part.key)}"' if part.key else ""
    if isinstance(part, Note):
        kind = f' class="{_e(part.kind)}"' if part.kind else ""
        out.append(f"<p{kind}{key}>{_e(part.text)}</p>")
        return
    if isinstance(part, Section):
        out.append(f'<section class="act"{key}><h2>{_e(part.title)}</h2>')
        for inner in part.parts:
            _part(out, inner, "h3")
        out.append("</section>")
        return
    if key:  # the whole part, for links and for the browser test's layout checks
        out.append(f"<div{key}>")
    out.append(f"<{heading}>{_e(part.title)}</{heading}>")
    if part.note:
        out.append(f'<p class="note">{_e(part.note)}</p>')
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
    if key:
        out.append("</div>")


def _cell(value: Cell) -> str:
    if value is None:
        return ""
    if isinstance(value, Text):
        hover = "" if value.hover is None else f' title="{_e(value.hover)}"'
        kind = f' class="{_e(value.kind)}"' if value.kind else ""
        return f"<span{kind}{hover}>{_e(value.text)}</span>"
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return _e(value)


def _e(text: str) -> str:
    return html.escape(text, quote=True)


_CSS = (
    "body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:78em}"
    "table{border-collapse:collapse;margin:1em 0}"
    "th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}"
    "th{background:#f3f3f3}td{font-variant-numeric:tabular-nums}"
    ".figures{display:flex;flex-wrap:wrap;gap:1.5em}.figures dt{color:#666;font-size:.85em}"
    ".figures dd{margin:0;font-size:1.4em;font-weight:600}.empty{color:#666;font-style:italic}"
    "img{max-width:100%}.note{color:#555;font-size:.9em;margin:.2em 0}"
    ".act{border:2px solid #c0392b;border-radius:6px;padding:0 1em .5em;margin:1em 0}"
    ".act h2{margin-top:.5em}.act h3{margin:.8em 0 .2em}.act table{margin:.3em 0}"
    ".code{font-family:ui-monospace,monospace;font-size:.85em;white-space:nowrap;"
    "display:inline-block;max-width:32em;overflow:hidden;text-overflow:ellipsis;"
    "vertical-align:bottom}"
    ".warn{color:#a93226;font-weight:600}p.warn{background:#fdedec;padding:.5em .8em;"
    "border-left:4px solid #c0392b;font-weight:normal;color:#222}"
    "td{white-space:nowrap}.msg{white-space:normal;display:inline-block;min-width:16em;max-width:28em}"
)
