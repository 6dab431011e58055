"""Self-contained HTML reports: tables and matplotlib charts, the PNGs inlined as data URIs."""

from __future__ import annotations

import base64
import html
import io
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on servers and executors

import matplotlib.pyplot as plt

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
class Report:
    """A report: key figures first, then charts and tables in order."""

    title: str
    figures: Sequence[tuple[str, Cell]] = ()
    notes: Sequence[str] = ()
    parts: Sequence[Table | Chart] = field(default_factory=list)


def bar_chart(title: str, labels: Sequence[str], values: Sequence[float], xlabel: str) -> Chart:
    """A horizontal bar chart, largest value on top."""
    height = max(2.0, 0.35 * len(labels) + 1.0)
    fig, ax = plt.subplots(figsize=(8, height))
    ax.barh(list(reversed(labels)), list(reversed(values)), color="#c0392b")
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    return Chart(title, _png(fig))


@dataclass(frozen=True)
class Periods:
    """The periods of a time axis (their starts, in UTC) and whether the first and last are
    only partly covered by the data: drawn shaded, so that they do not read as a drop."""

    starts: Sequence[datetime]
    step: timedelta
    first_partial: bool = False
    last_partial: bool = False


def period_end(start: datetime, step: timedelta) -> datetime:
    """The end of the period from `start`, or the last instant there is (in the year 9999)."""
    try:
        return start + step
    except OverflowError:
        return datetime.max.replace(tzinfo=start.tzinfo)


def _drawable(moment: datetime) -> datetime:
    # matplotlib draws dates of the years 1 to 9999, and rounds the very last ones beyond.
    return min(moment, _LAST_DRAWABLE.replace(tzinfo=moment.tzinfo))


_LAST_DRAWABLE = datetime(9999, 12, 31)


def _time_axis(ax: Any, periods: Periods) -> None:
    # Exactly the periods: matplotlib's margins would reach before the year 1 or after 9999.
    end = _drawable(period_end(periods.starts[-1], periods.step))
    ax.set_xlim(periods.starts[0], end)


def time_chart(
    title: str,
    periods: Periods,
    series: dict[str, Sequence[float]],
    ylabel: str,
    rate: tuple[str, Sequence[float]] | None = None,
) -> Chart:
    """One line per series over time; `rate` (a name and shares 0..1) on a right-hand axis."""
    fig, ax = plt.subplots(figsize=(9, 3.5))
    x: list[Any] = list(periods.starts)  # matplotlib plots datetimes; its stubs want numbers
    for name, values in series.items():
        ax.plot(x, values, label=name, marker="." if len(x) < 50 else None)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.set_xlabel("UTC")
    handles, labels = ax.get_legend_handles_labels()
    if rate is not None:
        right = ax.twinx()
        name, shares = rate
        (line,) = right.plot(x, [100 * v for v in shares], "k--", linewidth=1)
        right.set_ylabel(f"{name} (%)")
        right.set_ylim(0, 100)
        handles.append(line)
        labels.append(f"{name} (%, right)")
    _shade_partial(ax, periods)
    _time_axis(ax, periods)
    if len(labels) > 1:
        ax.legend(handles, labels, fontsize="small")
    fig.autofmt_xdate()
    return Chart(title, _png(fig))


def small_multiples(
    title: str, periods: Periods, series: dict[str, Sequence[float]], ylabel: str
) -> Chart:
    """One small chart per series, on one shared time axis: a trend per rule, say."""
    columns = min(3, len(series))
    rows = -(-len(series) // columns)
    fig, axes = plt.subplots(
        rows, columns, figsize=(3.2 * columns, 2.2 * rows + 0.6), sharex=True, squeeze=False
    )
    x: list[Any] = list(periods.starts)
    for ax, (name, values) in zip(axes.flat, series.items(), strict=False):
        ax.plot(x, values, color="#c0392b")
        ax.set_title(name, fontsize="small")
        ax.tick_params(labelsize="x-small")
        ax.set_ylim(bottom=0)
        _shade_partial(ax, periods, label=False)
        _time_axis(ax, periods)
    for ax in list(axes.flat)[len(series) :]:
        ax.set_visible(False)
    partial = "; shaded: partial period" if periods.first_partial or periods.last_partial else ""
    fig.suptitle(f"{title} ({ylabel}; UTC{partial})")
    fig.autofmt_xdate()
    return Chart(title, _png(fig))


def utc(moment: datetime | None) -> str | None:
    """A time as reports show it: to the second, in UTC, saying so."""
    return None if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def percent(part: float, whole: float) -> str:
    """`part` as a share of `whole`, for a report cell."""
    return "-" if not whole else f"{100 * part / whole:.1f}%"


def _shade_partial(ax: Any, periods: Periods, *, label: bool = True) -> None:
    ends = []
    if periods.first_partial:
        ends.append(periods.starts[0])
    if periods.last_partial and (len(periods.starts) > 1 or not periods.first_partial):
        ends.append(periods.starts[-1])
    for start in ends:
        end = _drawable(period_end(start, periods.step))
        ax.axvspan(start, end, color="#999999", alpha=0.25, label="_partial")
    if ends and label:
        ax.text(
            0.99,
            0.97,
            "shaded: partial period",
            transform=ax.transAxes,
            ha="right",
            va="top",
            fontsize="x-small",
            color="#555555",
        )


def chart_files(name: str, report: Report) -> dict[str, bytes]:
    """The report's charts as PNG files to write beside `name`.html, by file name."""
    charts = [p for p in report.parts if isinstance(p, Chart)]
    return {
        f"{name}-{i}-{re.sub(r'[^a-z0-9]+', '-', c.title.lower()).strip('-')[:40]}.png": c.png
        for i, c in enumerate(charts, 1)
    }


def render(report: Report) -> str:
    """The report as one HTML document with no external references."""
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(report.title)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{_e(report.title)}</h1>",
    ]
    if report.figures:
        out.append('<dl class="figures">')
        out.extend(f"<div><dt>{_e(k)}</dt><dd>{_cell(v)}</dd></div>" for k, v in report.figures)
        out.append("</dl>")
    out.extend(f"<p>{_e(note)}</p>" for note in report.notes)
    for part in report.parts:
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


def _png(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()


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
