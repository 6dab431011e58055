"""The kafka-policy-proxy command line."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

import structlog

from pipeline import cli as pipeline_cli
from policy.loader import PolicyError
from proxy import policy_cli, snapshot
from proxy.config import ConfigError, load_config
from proxy.logs import configure_logging
from proxy.server import ProxyServer

log = structlog.get_logger("proxy")


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
    run = commands.add_parser(
        "run",
        help="run the proxy",
        description="Run the proxy. Every config value can also be set from the environment: "
        "KPP_<SECTION>__<KEY>, e.g. KPP_UPSTREAM__BOOTSTRAP_SERVERS=host1:9092,host2:9092. "
        "SIGHUP reloads the policy file; SIGTERM or SIGINT stops accepting, lets responses in "
        "flight finish (shutdown_timeout_s) and exits. Exit code 2: bad config or policy.",
    )
    run.add_argument("--config", type=Path, help="YAML config file (optional if env sets all)")
    run.set_defaults(func=_run)
    policy_cli.add_parser(commands)
    snapshot.add_parser(commands)
    pipeline_cli.add_parser(commands)
    return parser


def _run(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"kafka-policy-proxy: {exc}", file=sys.stderr)
        return 2
    configure_logging(config.logging.level, config.logging.format)
    try:
        import uvloop
    except ImportError:
        runner = asyncio.run
    else:
        runner = uvloop.run
    try:
        return runner(_serve(ProxyServer(config)))
    except (ConfigError, PolicyError) as exc:
        print(f"kafka-policy-proxy: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        log.error("cannot start", detail=str(exc))
        return 1


async def _serve(server: ProxyServer) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, server.reload_policy)
    await server.start()
    log.info("proxy ready", bootstrap_servers=server.bootstrap_address)
    await stop.wait()
    log.info("shutting down")
    await server.shutdown()
    return 0
