"""The periods of the report's time axis, and the charts drawn over them."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from kafka_policy_proxy.pipeline.rendering.charts import small_multiples, time_chart
from kafka_policy_proxy.pipeline.rendering.periods import periods_between


@pytest.mark.parametrize(
    ("first", "last", "partial"),
    [
        ("10:00:00.000000", "12:59:59.500000", (False, False)),
        ("10:30:00.000000", "12:59:59.500000", (True, False)),
        ("10:00:00.000000", "12:10:00.000000", (False, True)),
        ("10:05:00.000000", "10:55:00.000000", (True, True)),
    ],
)
def test_a_period_the_data_does_not_cover_is_marked_partial(
    first: str, last: str, partial: tuple[bool, bool]
) -> None:
    day = "2026-10-01T"
    periods = periods_between(_instant(day + first), _instant(day + last))
    assert (periods.first_partial, periods.last_partial) == partial
    assert periods.starts[0] == _instant(day + "10:00:00.000000")
    assert periods.step == timedelta(hours=1)


@pytest.mark.parametrize(
    ("first", "last", "step"),
    [
        ("2026-10-01T10:00:00", "2026-10-04T10:00:00", timedelta(hours=1)),
        ("2026-10-01T10:00:00", "2026-12-01T10:00:00", timedelta(days=1)),
        ("2021-10-01T10:00:00", "2026-10-01T10:00:00", timedelta(weeks=1)),
        # A clock decades or centuries off: fewer, longer periods, never 740,000 days.
        ("1970-01-01T00:00:05", "2026-10-01T10:00:00", timedelta(weeks=4)),
        ("0001-01-01T00:00:05", "2026-10-01T10:00:00", timedelta(weeks=520)),
        ("2026-10-01T10:00:00", "9999-12-31T23:59:59.999999", timedelta(weeks=520)),
    ],
)
def test_a_long_or_absurd_span_is_charted_in_longer_periods(
    first: str, last: str, step: timedelta
) -> None:
    periods = periods_between(_instant(first), _instant(last))
    assert periods.step == step
    assert len(periods.starts) <= 1100
    assert periods.starts[0] <= _instant(first) < periods.starts[0] + step
    assert periods.starts[-1] <= _instant(last)
    if step >= timedelta(weeks=1):
        assert {s.weekday() for s in periods.starts} == {0}  # Mondays
    # Both chart kinds draw the first and last years there are (matplotlib cannot go beyond).
    series = {"a": [1.0] * len(periods.starts), "b": [2.0] * len(periods.starts)}
    for chart in (
        time_chart("t", periods, series, "events", ("rate", [0.5] * len(periods.starts))),
        small_multiples("t", periods, series, "events"),
    ):
        assert chart.png.startswith(b"\x89PNG")


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text + "+00:00")
