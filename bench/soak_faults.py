"""The soak's faults (broker restarts, a controller crash, a leader election, policy reloads, a
hanging cluster-state read, a killed worker) and what it samples (RSS, open files, metrics)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from harness.proxy_process import ProxyProcess


class StateRelay:
    """A TCP relay in front of the brokers for the proxy's cluster-state connection only.

    `hang()` stops it passing bytes (both ways, new connections too): reads of the cluster
    state time out, as against a broker that stopped answering.
    """

    def __init__(self, upstream: Sequence[tuple[str, int]]) -> None:
        self.upstream = list(upstream)
        self.port = 0
        self._open = asyncio.Event()
        self._open.set()
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        """Listen on a free local port; return it."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def hang(self, seconds: float) -> None:
        """Pass nothing for `seconds`."""
        self._open.clear()
        await asyncio.sleep(seconds)
        self._open.set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._open.wait()
        for host, port in self.upstream:
            try:
                up_reader, up_writer = await asyncio.open_connection(host, port)
                break
            except OSError:
                continue
        else:
            writer.close()
            return
        await asyncio.gather(
            self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True
        )

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await self._open.wait()
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()


async def hang_all(relays: Sequence[StateRelay], seconds: float) -> None:
    """Hang every relay at once: no broker answers the proxy's cluster-state reads."""
    await asyncio.gather(*(relay.hang(seconds) for relay in relays))


def rolling_restart(kafka: Any, nodes: Sequence[int], log: Any) -> None:
    """Each node in turn: controlled shutdown (SIGTERM), start again, wait for every node."""
    for node in nodes:
        log(f"rolling restart: stopping node {node}")
        kafka.stop_broker(node)
        log(f"rolling restart: node {node} stopped, starting it")
        time.sleep(2)
        kafka.start_broker(node, timeout=180)
        log(f"rolling restart: node {node} is back")


def crash_controller(kafka: Any, down_s: float, log: Any) -> None:
    """kill -9 the controller (node 1), leave it down a while, start it again."""
    log("controller: kill -9")
    kafka.kill_broker(1)
    time.sleep(down_s)
    kafka.start_broker(1, timeout=180)
    log("controller: back")


def elect_leaders(kafka: Any, log: Any) -> None:
    """A preferred leader election on every partition (leaders moved by the restarts)."""
    command = kafka.tool_command(
        "kafka-leader-election",
        "--bootstrap-server",
        kafka.bootstrap_servers,
        "--election-type",
        "PREFERRED",
        "--all-topic-partitions",
    )
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    log(f"leader election: exit {result.returncode}")


def worker_pids(supervisor: int) -> list[int]:
    """The supervisor's child processes (its workers)."""
    found = []
    for task in Path(f"/proc/{supervisor}/task").iterdir():
        with contextlib.suppress(OSError):
            found += [int(p) for p in (task / "children").read_text().split()]
    return sorted(found)


def kill_worker(supervisor: int, log: Any) -> int | None:
    """SIGKILL one worker (the supervisor starts another); its pid."""
    pids = worker_pids(supervisor)
    if not pids:
        return None
    log(f"worker: kill -9 {pids[0]}")
    with contextlib.suppress(ProcessLookupError):
        os.kill(pids[0], signal.SIGKILL)
    return pids[0]


def wait_for_workers(
    supervisor: int, count: int, gone: int | None, admin_port: int, log: Any
) -> None:
    """Until `gone` is reaped, the supervisor has `count` workers again and /readyz says
    ready (60 s at most)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pids = worker_pids(supervisor)
        if len(pids) == count and gone not in pids:
            with contextlib.suppress(OSError):
                url = f"http://127.0.0.1:{admin_port}/readyz"
                with urllib.request.urlopen(url, timeout=5) as response:
                    if response.status == 200:
                        log("worker: replaced, ready")
                        return
        time.sleep(0.5)
    log("worker: not replaced within 60 s")


def scrape(port: int) -> str:
    """The admin listener's /metrics text."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return str(response.read().decode())


def metric_total(text: str, name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and wanted <= set(sample.labels.items())
    )


def live_revision(text: str) -> str | None:
    """The policy revision every worker reports in force, or None if they differ."""
    live = {
        sample.labels["revision"]
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "kpp_policy_info" and sample.value == 1
    }
    return live.pop() if len(live) == 1 else None


class Sampler(threading.Thread):
    """Every `every` seconds: the proxy's RSS and open files (supervisor and workers)."""

    def __init__(self, supervisor: int, started_at: float, every: float = 2.0) -> None:
        super().__init__(name="sampler", daemon=True)
        self.supervisor, self.every = supervisor, every
        # (seconds since started_at, RSS MiB, open files): on the same clock as the phases.
        self.samples: list[tuple[float, float, int]] = []
        self.stopping = threading.Event()
        self.started_at = started_at

    def run(self) -> None:
        while not self.stopping.wait(self.every):
            rss, files = 0.0, 0
            for pid in [self.supervisor, *worker_pids(self.supervisor)]:
                with contextlib.suppress(OSError):
                    status = Path(f"/proc/{pid}/status").read_text()
                    kib = next(
                        (
                            int(row.split()[1])
                            for row in status.splitlines()
                            if row.startswith("VmRSS:")
                        ),
                        0,  # a process that has just died has no memory left
                    )
                    rss += kib / 1024
                    files += len(os.listdir(f"/proc/{pid}/fd"))
            self.samples.append((time.monotonic() - self.started_at, rss, files))


def write_samples(samples: list[tuple[float, float, int]], path: Path) -> None:
    """The samples as CSV, to redraw or compare runs."""
    rows = [f"{at:.1f},{rss:.1f},{files}" for at, rss, files in samples]
    path.write_text("\n".join(["seconds,rss_mib,open_files", *rows]) + "\n")


def chart(
    samples: list[tuple[float, float, int]], phases: list[tuple[float, str]], path: Path
) -> None:
    """RSS and open files over time, with the fault phases marked, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seconds = [s[0] / 60 for s in samples]
    figure, rss_axis = plt.subplots(figsize=(10, 4))
    rss_axis.plot(seconds, [s[1] for s in samples], color="tab:blue", label="RSS (MiB)")
    rss_axis.set_xlabel("minutes")
    rss_axis.set_ylabel("RSS, supervisor + workers (MiB)")
    files_axis = rss_axis.twinx()
    files_axis.plot(seconds, [s[2] for s in samples], color="tab:orange", label="open files")
    files_axis.set_ylabel("open files")
    for at, name in phases:
        rss_axis.axvline(at / 60, color="grey", linewidth=0.5)
        rss_axis.text(at / 60, rss_axis.get_ylim()[1], name, rotation=90, fontsize=7, va="top")
    figure.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


class Reloader(threading.Thread):
    """Every `every` seconds, SIGHUP with the next of: policy A, policy B, an invalid file.

    After each, /metrics must show the reload counted as ok or failed, and the revision in
    force must be the new one (or, after the invalid file, still the old one).
    """

    def __init__(
        self,
        proxy: ProxyProcess,
        path: Path,
        every: float,
        quiet: threading.Lock,
        admin_port: int,
    ) -> None:
        super().__init__(name="reloader", daemon=True)
        self.proxy, self.path, self.every = proxy, path, every
        self.admin_port = admin_port
        # Held while a worker is being replaced: a worker starting misses the SIGHUP.
        self.quiet = quiet
        base = path.read_text()
        # B: A plus a rule no traffic meets, so both give the traffic the same decisions.
        document = yaml.safe_load(base)
        document["rules"].append(
            {"name": "soak-extra", "match": {"topic_prefix": "never."}, "deny": True}
        )
        self.texts = [
            ("b", yaml.safe_dump(document, sort_keys=False), True),
            ("invalid", "rules: [{name: a\n", False),
            ("a", base, True),
        ]
        self.reloads = 0
        self.mismatches: list[str] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        index = 0
        while not self.stopping.wait(self.every):
            name, text, valid = self.texts[index % len(self.texts)]
            index += 1
            with self.quiet:
                try:
                    self._reload(name, text, valid)
                except OSError as exc:  # urllib's errors are OSErrors
                    self.mismatches.append(f"reload {name}: /metrics unreachable ({exc})")

    def _reload(self, name: str, text: str, valid: bool) -> None:
        """One reload, checked on /metrics."""
        before = scrape(self.admin_port)
        revision = live_revision(before)
        self.path.write_text(text)
        self.proxy.process.send_signal(signal.SIGHUP)
        result = "ok" if valid else "failed"
        want = metric_total(before, "kpp_policy_reloads_total", result=result) + 2
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            now = scrape(self.admin_port)
            if metric_total(now, "kpp_policy_reloads_total", result=result) >= want:
                break
            time.sleep(0.5)
        else:
            self.mismatches.append(f"reload {name}: both workers did not count it {result}")
            return
        after = live_revision(scrape(self.admin_port))
        if valid == (after == revision):
            self.mismatches.append(f"reload {name}: revision {revision} -> {after}")
        self.reloads += 1
