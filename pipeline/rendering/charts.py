"""The pages' charts, drawn with matplotlib as PNGs: bars, lines over time, small multiples.

A chart's title is the page's heading above it, never drawn in the image as well. A partial
first or last period (the data starts or stops inside it) is drawn as what it is: its point
hollow, the line to it dashed, its band shaded and labelled with the time the data stops, so
that a half-covered last day does not read as a collapse.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on servers and executors

import matplotlib.dates as mdates
import matplotlib.pyplot as plt
from matplotlib.lines import Line2D

from kafka_policy_proxy.pipeline.rendering.html_page import Chart
from kafka_policy_proxy.pipeline.rendering.periods import Periods, partial_note, period_end

# matplotlib draws dates of the years 1 to 9999, and rounds the very last ones beyond.
_LAST_DRAWABLE = datetime(9999, 12, 31)
_PARTIAL = "#777777"


def bar_chart(
    title: str, labels: Sequence[str], values: Sequence[float], xlabel: str, note: str = ""
) -> Chart:
    """A horizontal bar chart, largest value on top."""
    height = max(2.0, 0.35 * len(labels) + 0.8)
    fig, ax = plt.subplots(figsize=(8, height))
    ax.barh(list(reversed(labels)), list(reversed(values)), color="#c0392b")
    ax.set_xlabel(xlabel)
    return Chart(title, _png(fig), note)


def time_chart(
    title: str,
    periods: Periods,
    series: dict[str, Sequence[float]],
    ylabel: str,
    rate: tuple[str, Sequence[float]] | None = None,
) -> Chart:
    """One line per series over time; `rate` (a name and shares 0..1) on a right-hand axis.
    The legend sits above the plot, where no line runs through it."""
    fig, ax = plt.subplots(figsize=(9, 3.6))
    x = _middles(periods)
    handles: list[Any] = []
    for i, (name, values) in enumerate(series.items()):
        color = f"C{i}"
        _plot(ax, periods, x, values, color=color)
        handles.append(Line2D([], [], color=color, marker="o", markersize=4, label=name))
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("UTC")
    if rate is not None:
        right = ax.twinx()
        name, shares = rate
        _plot(right, periods, x, [100 * v for v in shares], color="k", linewidth=1, rate=True)
        right.set_ylabel(f"{name} (%)")
        right.set_ylim(0, 100)
        handles.append(Line2D([], [], color="k", linestyle=":", label=f"{name} (%, right)"))
    if periods.first_partial or periods.last_partial:
        handles.append(_partial_handle())
    _mark_partial(ax, periods, label=True)
    _time_axis(ax, periods)
    ax.legend(
        handles=handles,
        loc="lower left",
        bbox_to_anchor=(0, 1.01),
        ncols=min(len(handles), 5),
        frameon=False,
        fontsize="small",
    )
    fig.autofmt_xdate()
    return Chart(title, _png(fig), partial_note(periods))


def small_multiples(
    title: str, periods: Periods, series: dict[str, Sequence[float]], ylabel: str
) -> Chart:
    """One small chart per series, on one shared time axis and one shared y scale (the note
    says so): a trend per rule, say."""
    columns = min(3, len(series))
    rows = -(-len(series) // columns)
    fig, axes = plt.subplots(
        rows,
        columns,
        figsize=(3.2 * columns, 2.1 * rows + 0.3),
        sharex=True,
        sharey=True,
        squeeze=False,
    )
    x = _middles(periods)
    for ax, (name, values) in zip(axes.flat, series.items(), strict=False):
        _plot(ax, periods, x, values, color="#c0392b", markersize=3)
        ax.set_title(name, fontsize="small")
        ax.tick_params(labelsize="x-small")
        ax.set_ylim(bottom=0)
        _mark_partial(ax, periods, label=False)
        _time_axis(ax, periods)
        # Few, short dates: the panels are narrow.
        locator = mdates.AutoDateLocator(minticks=2, maxticks=5)  # type: ignore[no-untyped-call]
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(
            mdates.ConciseDateFormatter(locator)  # type: ignore[no-untyped-call]
        )
    for ax in list(axes.flat)[len(series) :]:
        ax.set_visible(False)
    top = max((max(v, default=0) for v in series.values()), default=0)
    note = f"One y scale for every panel: {ylabel}, 0 to {top:,.0f} at the highest; UTC."
    return Chart(title, _png(fig), " ".join(filter(None, (note, partial_note(periods)))))


def _middles(periods: Periods) -> list[Any]:
    # Each period's point in its middle, inside its band when it is partial. matplotlib plots
    # datetimes; its stubs want numbers.
    return [s + (_drawable(period_end(s, periods.step)) - s) / 2 for s in periods.starts]


def _partial_indexes(periods: Periods) -> tuple[bool, bool]:
    # A single period both first and last is drawn once, as the last.
    last = periods.last_partial or (periods.first_partial and len(periods.starts) == 1)
    first = periods.first_partial and len(periods.starts) > 1
    return first, last


def _plot(
    ax: Any,
    periods: Periods,
    x: Sequence[Any],
    values: Sequence[float],
    *,
    color: str,
    markersize: float = 4,
    linewidth: float = 1.5,
    rate: bool = False,
) -> None:
    """The whole periods solid, each partial one hollow at the end of a dashed segment."""
    first, last = _partial_indexes(periods)
    lo, hi = int(first), len(x) - int(last)
    style = ":" if rate else "-"
    marker = None if len(x) >= 50 else "o"
    if hi > lo:
        ax.plot(
            x[lo:hi],
            values[lo:hi],
            style,
            color=color,
            linewidth=linewidth,
            marker=marker,
            markersize=markersize,
        )
    for ends in (slice(0, 2) if first else None, slice(-2, None) if last else None):
        if ends is None:
            continue
        ax.plot(x[ends], values[ends], "--", color=color, linewidth=linewidth * 0.8, alpha=0.6)
        point = 0 if ends.start == 0 else -1
        ax.plot(
            [x[point]],
            [values[point]],
            "o",
            markerfacecolor="white",
            markeredgecolor=color,
            markersize=markersize + 2,
        )


def _partial_handle() -> Line2D:
    return Line2D(
        [],
        [],
        color=_PARTIAL,
        linestyle="--",
        marker="o",
        markerfacecolor="white",
        label="partial period",
    )


def _drawable(moment: datetime) -> datetime:
    return min(moment, _LAST_DRAWABLE.replace(tzinfo=moment.tzinfo))


def _time_axis(ax: Any, periods: Periods) -> None:
    # Exactly the periods: matplotlib's margins would reach before the year 1 or after 9999.
    end = _drawable(period_end(periods.starts[-1], periods.step))
    ax.set_xlim(periods.starts[0], end)


def _mark_partial(ax: Any, periods: Periods, *, label: bool) -> None:
    """Shade each partial period; on the main chart, say inside it when the data stops."""
    first, last = _partial_indexes(periods)
    marked = [(periods.starts[0], periods.first, "from")] if first else []
    if last:
        marked.append((periods.starts[-1], periods.last, "to"))
    for start, moment, word in marked:
        end = _drawable(period_end(start, periods.step))
        ax.axvspan(start, end, color="#999999", alpha=0.18, label="_partial")
        if label and moment is not None:
            clock = "%H:%M" if periods.step < timedelta(days=1) else "%m-%d %H:%M"
            ax.text(
                start + (end - start) / 2,
                0.97,
                f"partial\n{word} {moment.strftime(clock)}",
                transform=ax.get_xaxis_transform(),
                ha="center",
                va="top",
                fontsize="x-small",
                color="#444444",
            )


def _png(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()
