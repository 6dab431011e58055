"""The pages' charts, drawn with matplotlib as PNGs: bars, lines over time, small multiples."""

from __future__ import annotations

import io
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on servers and executors

import matplotlib.pyplot as plt

from kafka_policy_proxy.pipeline.rendering.html_page import Chart
from kafka_policy_proxy.pipeline.rendering.periods import Periods, period_end

# matplotlib draws dates of the years 1 to 9999, and rounds the very last ones beyond.
_LAST_DRAWABLE = datetime(9999, 12, 31)


def bar_chart(title: str, labels: Sequence[str], values: Sequence[float], xlabel: str) -> Chart:
    """A horizontal bar chart, largest value on top."""
    height = max(2.0, 0.35 * len(labels) + 1.0)
    fig, ax = plt.subplots(figsize=(8, height))
    ax.barh(list(reversed(labels)), list(reversed(values)), color="#c0392b")
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    return Chart(title, _png(fig))


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


def _drawable(moment: datetime) -> datetime:
    return min(moment, _LAST_DRAWABLE.replace(tzinfo=moment.tzinfo))


def _time_axis(ax: Any, periods: Periods) -> None:
    # Exactly the periods: matplotlib's margins would reach before the year 1 or after 9999.
    end = _drawable(period_end(periods.starts[-1], periods.step))
    ax.set_xlim(periods.starts[0], end)


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


def _png(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()
