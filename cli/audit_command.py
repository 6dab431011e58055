"""`kafka-policy-proxy audit show ID`: the decision record behind an id a client was shown."""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from pathlib import Path

from kafka_policy_proxy.pipeline.sources.decision_lookup import (
    Lookup,
    find_in_files,
    find_in_lake,
)
from kafka_policy_proxy.policy.decision_ids import parse_decision_id

FOUND, NOT_FOUND, INVALID = 0, 1, 2

DESCRIPTION = """\
Print the decision record with this id as JSON. Every denial message a
client sees ends with its decision's id: `... (decision ID)`.

--file PATH searches the audit file PATH, its rotations beside it (PATH.1,
PATH.2, ...) and, under --workers, each worker's file (audit.worker-N.jsonl
for audit.jsonl) with its rotations. --lake PATH searches the audit lake
that `pipeline ingest` writes (a local path; needs the 'pipeline' extra for
pyarrow), reading only the date partitions the id's own time names. Files
are searched first, in the order given, then the lake. A request recorded as
one summary record has one id, which every topic's message quotes: that id
finds the summary record.

ID is a decision id as the message shows it (a UUIDv7, e.g.
01a20194-3a03-779b-923b-43ebbcbe7997); the 32 hex digits of the ids of older
records are accepted too (the lake is then searched on every date).

Exit codes: 0 found (the record on stdout, where it was on stderr); 1 not
found (stderr says where it looked); 2 a bad id or arguments, or a lake that
cannot be read.
"""


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the `audit` command on the main CLI."""
    parser = subparsers.add_parser(
        "audit",
        help="find a decision record by the id a denial message quotes",
        description="Read the proxy's audit log.",
    )
    commands = parser.add_subparsers(dest="audit_command", required=True, metavar="COMMAND")
    show = commands.add_parser(
        "show",
        help="print the decision record with this id, from audit files or the lake",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    show.add_argument("decision_id", metavar="ID", help="the id a denial message ends with")
    add_location(show)
    show.set_defaults(func=cmd_show)


def add_location(parser: argparse.ArgumentParser) -> None:
    """Add --file and --lake: where a command looks a decision record up."""
    parser.add_argument(
        "--file",
        type=Path,
        action="append",
        default=[],
        metavar="PATH",
        help="an audit file (audit.file in the proxy config), searched with its rotations "
        "and workers' files; may be given more than once",
    )
    parser.add_argument("--lake", metavar="PATH", help="the audit lake's root directory")


def cmd_show(args: argparse.Namespace) -> int:
    """Run `audit show`: 0 found, 1 not found, 2 a bad id, arguments or lake."""
    found = locate(args.decision_id, args, "audit show")
    if isinstance(found, int):
        return found
    print(json.dumps(found.record, indent=2))
    print(f"found in {found.found_in}", file=sys.stderr)
    return FOUND


def locate(text: str, args: argparse.Namespace, command: str) -> Lookup | int:
    """The record with this id in `args.file` then `args.lake`, or the exit code once the
    failure is reported: 1 not found, 2 a bad id, arguments or lake."""
    try:
        decision_id = parse_decision_id(text)
    except ValueError as exc:
        return _fail(command, str(exc), INVALID)
    if not args.file and args.lake is None:
        return _fail(command, "give --file PATH or --lake PATH (or both): where to look", INVALID)
    searched: list[str] = []
    found = find_in_files(decision_id, args.file) if args.file else Lookup()
    searched += found.searched
    if found.record is None and args.lake is not None:
        lake = _lake(decision_id, args.lake, command)
        if lake is None:
            return INVALID
        found = lake
        searched += found.searched
    if found.record is None:
        where = "; ".join(searched) or "nowhere"
        message = f"no record with decision id {decision_id}; looked in: {where}"
        return _fail(command, message, NOT_FOUND)
    return found


def _lake(decision_id: uuid.UUID, lake: str, command: str) -> Lookup | None:
    """The lake's answer, or None once a lake that cannot be read is reported."""
    try:
        return find_in_lake(decision_id, lake)
    except ImportError as exc:
        _fail(command, f"--lake needs the 'pipeline' extra (pyarrow): {exc}", INVALID)
    except (ValueError, OSError) as exc:
        _fail(command, f"cannot read the lake {lake}: {exc}", INVALID)
    return None


def _fail(command: str, message: str, code: int) -> int:
    print(f"kafka-policy-proxy {command}: {message}", file=sys.stderr)
    return code
