"""`run --workers N`: a supervisor and N worker processes sharing the listeners.

Each worker is a whole proxy with its own event loop, started as `kafka-policy-proxy run` with
WORKER_ENV set; its listeners use SO_REUSEPORT, so the kernel spreads connections over them.
The supervisor forwards SIGHUP and SIGTERM, restarts a worker that dies, and serves the admin
listener: /metrics adds up the workers' prometheus-client files in PROMETHEUS_MULTIPROC_DIR,
/readyz reads the readiness each worker writes there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import structlog
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from kafka_policy_proxy.proxy.cluster.budget_locks import BUDGET_LOCKS_ENV
from kafka_policy_proxy.proxy.config import ProxyConfig
from kafka_policy_proxy.proxy.runtime.admin_http import AdminServer

log = structlog.get_logger("proxy.runtime.workers")

WORKER_ENV = "KAFKA_POLICY_PROXY_WORKER"  # the worker's number, 1..N
METRICS_ENV = "PROMETHEUS_MULTIPROC_DIR"
LAST_GOOD_ENV = "KAFKA_POLICY_PROXY_LAST_GOOD_POLICY"  # the policy text the workers last loaded
REPORT_INTERVAL_S = 1.0
STALE_AFTER_S = 5.0
RESTART_DELAY_S = 1.0
MAX_RESTART_DELAY_S = 30.0


def worker_number() -> int | None:
    """This process's worker number, or None if it is not a worker."""
    value = os.environ.get(WORKER_ENV)
    return int(value) if value else None


def last_good_policy() -> Path | None:
    """In a worker: where the workers keep the policy they last loaded."""
    value = os.environ.get(LAST_GOOD_ENV)
    return Path(value) if value else None


def _report_path(directory: Path, pid: int) -> Path:
    return directory / f"readiness-{pid}.json"


async def report_readiness(readiness: Callable[[], list[str]]) -> None:
    """In a worker: write this process's readiness for the supervisor, every second."""
    directory = Path(os.environ[METRICS_ENV])
    path = _report_path(directory, os.getpid())
    temporary = path.with_suffix(".tmp")
    while True:
        temporary.write_text(json.dumps({"reasons": readiness(), "time": time.time()}))
        temporary.replace(path)
        await asyncio.sleep(REPORT_INTERVAL_S)


class Supervisor:
    """Starts the workers, keeps them running, and passes signals on to them."""

    def __init__(self, config: ProxyConfig, count: int, argv: Sequence[str]) -> None:
        self._config = config
        self._count = count
        self._argv = list(argv)  # the `run` arguments each worker gets
        self._directory = Path(os.environ.get(METRICS_ENV) or tempfile.mkdtemp(prefix="kpp-"))
        self._owns_directory = METRICS_ENV not in os.environ
        self._workers: dict[int, asyncio.subprocess.Process] = {}
        self._stopping = False
        self._exit_code = 0
        self.admin = AdminServer(self.readiness, registry=self._registry)

    def _registry(self) -> CollectorRegistry:
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(self._directory))  # type: ignore[no-untyped-call]
        return registry

    def readiness(self) -> list[str]:
        """Every worker's reasons not to take traffic, prefixed with its number."""
        reasons = ["shutting down"] if self._stopping else []
        now = time.time()
        for number in range(1, self._count + 1):
            process = self._workers.get(number)
            if process is None or process.returncode is not None:
                reasons.append(f"worker {number}: not running")
                continue
            try:
                report = json.loads(_report_path(self._directory, process.pid).read_text())
            except (OSError, ValueError):
                reasons.append(f"worker {number}: no readiness report yet")
                continue
            if now - report["time"] > STALE_AFTER_S:
                reasons.append(f"worker {number}: no report for {now - report['time']:.0f}s")
            reasons += [f"worker {number}: {reason}" for reason in report["reasons"]]
        return reasons

    async def run(self) -> int:
        """Run until SIGTERM/SIGINT (then drain every worker), or until a worker cannot start."""
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGHUP, self._forward, signal.SIGHUP)
        admin = self._config.admin
        if admin.port is not None:
            await self.admin.start(admin.bind_host, admin.port)
        watchers = [asyncio.create_task(self._keep(n, stop)) for n in range(1, self._count + 1)]
        log.info("workers started", workers=self._count, metrics_dir=str(self._directory))
        await stop.wait()
        self._stopping = True
        log.info("shutting down workers", workers=len(self._workers))
        self._forward(signal.SIGTERM)
        await asyncio.gather(*watchers)
        await self.admin.close()
        if self._owns_directory:
            shutil.rmtree(self._directory, ignore_errors=True)
        return self._exit_code

    def _forward(self, sig: signal.Signals) -> None:
        for process in self._workers.values():
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(sig)

    async def _keep(self, number: int, stop: asyncio.Event) -> None:
        """Run worker `number`, and start it again whenever it dies unasked."""
        started, delay = False, RESTART_DELAY_S
        while True:
            env = {
                **os.environ,
                WORKER_ENV: str(number),
                METRICS_ENV: str(self._directory),
                LAST_GOOD_ENV: str(self._directory / "policy.last-good.yaml"),
                # Budget turns are taken across the workers through lock files here.
                BUDGET_LOCKS_ENV: str(self._directory / "budget-locks"),
            }
            process = await asyncio.create_subprocess_exec(*worker_command(self._argv), env=env)
            self._workers[number] = process
            code = await process.wait()
            mark_process_dead(process.pid, str(self._directory))  # type: ignore[no-untyped-call]
            report = _report_path(self._directory, process.pid)
            served = report.exists()  # written once the worker had started
            report.unlink(missing_ok=True)
            if self._stopping:
                if code != 0:
                    log.warning("worker exited", worker=number, exit_code=code)
                return
            if not served and not started:
                # Restarting would fail the same way (a port in use, a policy that is refused).
                log.error("worker could not start; stopping", worker=number, exit_code=code)
                self._exit_code = code or 1
                stop.set()
                return
            if served:
                started, delay = True, RESTART_DELAY_S
                log.error("worker died; restarting it", worker=number, exit_code=code)
            else:
                # It served before, and the other workers still do: keep trying, more slowly.
                delay = min(delay * 2, MAX_RESTART_DELAY_S)
                log.error(
                    "worker could not start again; retrying",
                    worker=number,
                    exit_code=code,
                    retry_in_s=delay,
                )
            await asyncio.sleep(delay)


def worker_command(argv: Sequence[str]) -> list[str]:
    """The command line of a worker process: this Python, the command, the `run` arguments."""
    return [sys.executable, "-m", "kafka_policy_proxy", *argv]
