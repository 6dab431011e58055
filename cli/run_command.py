"""`kafka-policy-proxy run`: load the config, serve until SIGTERM or SIGINT, reload on SIGHUP."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path
from typing import Literal

import structlog

from kafka_policy_proxy.cli.logs import configure_logging
from kafka_policy_proxy.policy.loader import PolicyError
from kafka_policy_proxy.proxy.config import ConfigError, load_config
from kafka_policy_proxy.proxy.runtime.cpus import usable_cpus
from kafka_policy_proxy.proxy.runtime.server import ProxyServer
from kafka_policy_proxy.proxy.runtime.workers import Supervisor, report_readiness, worker_number

log = structlog.get_logger("proxy")


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the `run` command on the main CLI."""
    run = subparsers.add_parser(
        "run",
        help="run the proxy",
        description="Run the proxy. Every config value can also be set from the environment: "
        "KPP_<SECTION>__<KEY>, e.g. KPP_UPSTREAM__BOOTSTRAP_SERVERS=host1:9092,host2:9092. "
        "SIGHUP reloads the policy file and the TLS files; SIGTERM or SIGINT stops accepting, "
        "lets responses in "
        "flight finish (shutdown_timeout_s) and exits. With --workers N, a supervisor runs N "
        "worker processes sharing the ports (SO_REUSEPORT), passes signals on, restarts a "
        "worker that dies and serves the admin listener for all. Exit code 2: bad config or "
        "policy. "
        "`config show` prints the config this would use.",
    )
    run.add_argument("--config", type=Path, help="YAML config file (optional if env sets all)")
    run.add_argument(
        "--workers",
        type=_workers,
        help="processes sharing the listeners (an int, or auto = the CPUs this process may use: "
        "its affinity, capped by the cgroup CPU quota); overrides the config's `workers`",
    )
    run.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    """Run the proxy: 0 stopped by a signal, 1 cannot start, 2 bad config or policy."""
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"kafka-policy-proxy: {exc}", file=sys.stderr)
        return 2
    configure_logging(config.logging.level, config.logging.format)
    number = worker_number()
    workers = args.workers or config.workers
    if workers == "auto":
        cpus = usable_cpus()
        workers = cpus.count
        if number is None:
            log.info("workers: auto", workers=workers, source=cpus.source)
    if number is None and workers > 1:
        argv = ["run", *(["--config", str(args.config)] if args.config else [])]
        return asyncio.run(Supervisor(config, workers, argv).run())
    try:
        import uvloop
    except ImportError:
        runner = asyncio.run
    else:
        runner = uvloop.run
    try:
        return runner(_serve(ProxyServer(config, worker=number)))
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
    loop.add_signal_handler(signal.SIGHUP, server.reload)
    await server.start()
    # Under --workers, the supervisor's /readyz reads what each worker reports.
    reporting = (
        None
        if worker_number() is None
        else asyncio.ensure_future(report_readiness(server.readiness))
    )
    log.info("proxy ready", bootstrap_servers=server.bootstrap_address)
    await stop.wait()
    log.info("shutting down")
    await server.shutdown()
    if reporting is not None:
        reporting.cancel()
    return 0


def _workers(text: str) -> int | Literal["auto"]:
    if text == "auto":
        return "auto"
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: an integer of at least 1, or auto")
    return int(text)
