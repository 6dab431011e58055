"""The kafka-policy-proxy command: the proxy, the policy tools, the snapshot, the Spark jobs and
the audit lookup.

This package is the only command line: every subcommand and all argparse code live here, above
the layers, so that none of them knows of argv. Each subcommand is one module with its own
`add_parser`.
"""

from __future__ import annotations

import argparse
import sys

from kafka_policy_proxy import __version__
from kafka_policy_proxy.cli import (
    audit_command,
    config_command,
    pipeline_command,
    policy_command,
    run_command,
    snapshot_command,
)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the kafka-policy-proxy command."""
    parser = build_parser()
    args = parser.parse_args(argv)
    sys.exit(args.func(args))


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="kafka-policy-proxy",
        description="A Kafka wire-protocol proxy that enforces topic-management policies.",
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}", help="print the version"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run_command.add_parser(commands)
    config_command.add_parser(commands)
    policy_command.add_parser(commands)
    snapshot_command.add_parser(commands)
    pipeline_command.add_parser(commands)
    audit_command.add_parser(commands)
    return parser
