"""The `--now` flag of the policy tools: the instant to judge at, else the wall clock."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime


def instant(text: str) -> datetime:
    """An RFC 3339 time with an offset or Z (argparse type); a naive time is refused."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an RFC 3339 time with an offset or Z (2027-01-31T18:00:00Z)"
        )
    return moment


def add_now(parser: argparse.ArgumentParser) -> None:
    """Add `--now` to a subcommand."""
    parser.add_argument(
        "--now",
        type=instant,
        help="the instant to judge at (RFC 3339 with an offset or Z): which exceptions are in "
        "force, and what exception_policy.max_days counts from; default: the clock",
    )


def moment(args: argparse.Namespace) -> datetime:
    """The command's `--now`, else the wall clock."""
    given: datetime | None = args.now
    return given if given is not None else datetime.now(UTC)
