"""The kafka-policy-proxy command: the proxy, the policy tools, the snapshot and the Spark jobs.

It sits above the layers so that none of them imports another's command line; each layer
contributes its subcommands through its own `add_parser`.
"""

from __future__ import annotations

import argparse
import sys

from pipeline import cli as pipeline_cli
from proxy import config_cli, policy_cli, run_command, snapshot


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
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run_command.add_parser(commands)
    config_cli.add_parser(commands)
    policy_cli.add_parser(commands)
    snapshot.add_parser(commands)
    pipeline_cli.add_parser(commands)
    return parser


if __name__ == "__main__":
    main()
