"""The periods of a chart's time axis: hours, days beyond a week, and longer steps beyond those.

Beyond a week, hourly points are too many to read: the axis switches to days, and beyond
MAX_PERIODS of those to the first longer step that fits (weeks, 4, 52 or 520 weeks, from
Mondays). A clock years off, one event in the year 1, must neither make a chart of 740,000
days nor fail the job. A first or last period the data does not cover from its start to its
end is partial, and drawn so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

HOURLY_SPAN = timedelta(days=7)
MAX_PERIODS = 1100
LONG_STEPS = tuple(timedelta(weeks=w) for w in (1, 4, 52, 520))


@dataclass(frozen=True)
class Periods:
    """The periods of a time axis (their starts, in UTC) and whether the first and last are
    only partly covered by the data (which runs from `first` to `last`): drawn as partial, so
    that they do not read as a drop."""

    starts: Sequence[datetime]
    step: timedelta
    first_partial: bool = False
    last_partial: bool = False
    first: datetime | None = None
    last: datetime | None = None


def periods_between(first: datetime, last: datetime) -> Periods:
    """Hours, or days beyond a week (or longer steps), from the `first` event's to the `last`'s;
    a period the data does not cover from start to end (the first began earlier, the last
    ends later) is partial."""
    step = timedelta(hours=1)
    if last - first > HOURLY_SPAN:
        steps = (timedelta(days=1), *LONG_STEPS)
        step = next((s for s in steps if (last - first) / s < MAX_PERIODS), steps[-1])
    start = bucket(first, step)
    # Every period from the first to the last, so quiet ones show as zeros, not as gaps.
    starts = [start]
    while (following := _following(starts[-1], step)) is not None and following <= last:
        starts.append(following)
    # Events are stamped to the microsecond: the last second of a period counts as its end.
    return Periods(
        starts,
        step,
        first_partial=first > start,
        last_partial=last < period_end(starts[-1], step) - timedelta(seconds=1),
        first=first,
        last=last,
    )


def period_end(start: datetime, step: timedelta) -> datetime:
    """The end of the period from `start`, or the last instant there is (in the year 9999)."""
    try:
        return start + step
    except OverflowError:
        return datetime.max.replace(tzinfo=start.tzinfo)


def bucket(moment: datetime, step: timedelta) -> datetime:
    """The start of the period of length `step` that holds `moment`."""
    if step < timedelta(days=1):
        return moment.replace(minute=0, second=0, microsecond=0)
    # Whole steps of days from 0001-01-01, a Monday: weeks start on Mondays.
    ordinal = moment.toordinal()
    day = date.fromordinal(ordinal - (ordinal - 1) % step.days)
    return datetime.combine(day, time(), moment.tzinfo)


def per(periods: Periods) -> str:
    """What one period is, for a title: `hour`, `day`, `week` or `4 weeks`."""
    if periods.step < timedelta(days=1):
        return "hour"
    if periods.step == timedelta(days=1):
        return "day"
    weeks = periods.step.days // 7
    return "week" if weeks == 1 else f"{weeks} weeks"


def _following(start: datetime, step: timedelta) -> datetime | None:
    try:
        return start + step
    except OverflowError:
        return None  # no period starts after the year 9999


def partial_note(periods: Periods) -> str:
    """How a chart marks its partial periods, with the times the data starts and stops in
    them; empty when every period is whole."""
    said = []
    if periods.first_partial and periods.first is not None:
        said.append(f"the first from {_clock(periods.first, periods.step)}")
    if periods.last_partial and periods.last is not None:
        said.append(f"the last to {_clock(periods.last, periods.step)}")
    if not said:
        return ""
    return f"Dashed, hollow points: partial {per(periods)}s ({' and '.join(said)} UTC)."


def _clock(moment: datetime, step: timedelta) -> str:
    return moment.strftime("%H:%M" if step < timedelta(days=1) else "%Y-%m-%d %H:%M")
