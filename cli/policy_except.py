"""`kafka-policy-proxy policy except`: print a ready-to-paste exception for a recorded denial."""

from __future__ import annotations

import argparse
import sys

import yaml

from kafka_policy_proxy.cli.audit_command import add_location, locate
from kafka_policy_proxy.cli.instants import add_now, moment
from kafka_policy_proxy.policy.exception_draft import DraftError, draft_exception, expiry

OK, INVALID = 0, 2


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `policy except` on the `policy` command."""
    parser = commands.add_parser(
        "except",
        help="print a ready-to-paste exception (YAML) waiving what denied a recorded decision",
    )
    parser.add_argument("--decision", required=True, metavar="ID", help="the decision id")
    parser.add_argument(
        "--expires",
        required=True,
        help="a duration from now (7d, 12h, 90m, 2w) or an RFC 3339 time with an offset or Z",
    )
    parser.add_argument("--reason", required=True, help="why the exception exists")
    parser.add_argument("--ticket", help="where it was agreed")
    parser.add_argument("--name", help="the exception's name (default: exception-<decision id>)")
    add_location(parser)
    parser.add_argument(
        "--item",
        action="store_true",
        help="print the list item only (indented two spaces), to paste under an existing "
        "`exceptions:`",
    )
    add_now(parser)
    parser.set_defaults(func=cmd_except)


def cmd_except(args: argparse.Namespace) -> int:
    """Print the exception; exit 1 if the decision is not found, 2 if it cannot be waived."""
    found = locate(args.decision, args, "policy except")
    if isinstance(found, int):
        return found
    record = found.record
    assert record is not None
    try:
        exception = draft_exception(
            record,
            expires=expiry(args.expires, moment(args)),
            reason=args.reason,
            ticket=args.ticket,
            name=args.name,
        )
    except (DraftError, OSError) as exc:
        print(f"policy except: {exc}", file=sys.stderr)
        return INVALID
    item = yaml.safe_dump([exception], sort_keys=False, allow_unicode=True)
    print(
        f"# waives what denied decision {args.decision} ({record['api']} of "
        f"{record['topic']!r} by {record['principal']}, {record['time']})"
    )
    if not args.item:
        print("exceptions:")
    # Indented two spaces, as `exceptions:` items are in the examples and docs.
    print("".join(f"  {line}\n" for line in item.splitlines()), end="")
    return OK
