"""One growth curve as a PNG: a few series against a size axis, log-log, with a linear guide.

Shared by the growth benches (bench/growth_*.py); docs/benchmarks.md shows their charts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

Series = Mapping[str, Sequence[tuple[float, float]]]


def draw(
    path: Path,
    title: str,
    xlabel: str,
    ylabel: str,
    series: Series,
    *,
    guide: str,
    slope: float = 1.0,
) -> None:
    """Plot each series (x, y) on log-log axes; `guide` names the series a dashed line of
    `slope` (1: linear growth, 0: flat) is drawn through, from its first point."""
    import matplotlib

    matplotlib.use("Agg")  # no display on servers
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4.5))
    for name, points in series.items():
        axis.plot([x for x, _ in points], [y for _, y in points], marker="o", label=name)
    start = series[guide][0]
    xs = [x for x, _ in series[guide]]
    axis.plot(
        xs,
        [start[1] * (x / start[0]) ** slope for x in xs],
        linestyle="--",
        color="grey",
        linewidth=0.8,
        label=f"{'flat' if slope == 0 else 'linear'} from {guide}'s first point",
    )
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlabel(xlabel)
    axis.set_ylabel(ylabel)
    axis.set_title(title)
    axis.grid(True, which="both", linewidth=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
