"""Soak and chaos: a real 3-broker cluster through the proxy (`--workers 2`, the example policy)
under producers, consumers, idle, slow and new connections and admin traffic, while brokers,
the proxy and the policy change underneath. Exits 1 on any lost, duplicated or misordered
record, misordered response, wrong decision or mishandled reload.

Run: make soak, or .venv/bin/python -m bench.soak [--minutes 30] [--quick] [--splice] [--out DIR]
`--quick` (the integration test runs `--minutes 1 --quick`, its faults back to back): fewer
connections, one broker in the rolling restart, shorter faults. The report (JSON), a chart
of RSS and open files, and the logs go to `--out`.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from bench import soak_admin as admin
from bench import soak_faults as faults
from bench import soak_traffic as traffic
from harness import REPO
from harness.local_kafka import LocalKafka
from harness.proxy_process import ProxyProcess

PORT_BASE = 20092  # cluster: 20092-20691
BOOTSTRAP_PORT, NODE_PORT_BASE, ADMIN_PORT = 20700, 20710, 20790
RECORDS, TARGET, PROTECTED = "soak.records", "soak.admin-target", "payments.soak"
JAVA_TAG = 7
STATE_TIMEOUT_S = 5.0  # the proxy's cluster-state request timeout


@dataclass(frozen=True)
class Shape:
    """How hard and how long: the full soak or the quick one."""

    idle: int
    slow: int
    new_per_s: float
    producer_rate: float  # records/s per confluent producer
    java_rate: int
    restart: tuple[int, ...]
    controller_down_s: float
    hang_s: float
    reload_every_s: float
    warmup_s: float
    gap_s: float


FULL = Shape(500, 50, 50, 1000, 500, (3, 2, 1), 10, 20, 30, 120, 60)
QUICK = Shape(50, 5, 10, 200, 100, (2,), 5, 20, 15, 15, 3)


def log(message: str) -> None:
    """Progress on stderr, with the time."""
    print(f"soak {time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def create_topics(bootstrap: str) -> None:
    """The topics the traffic uses, created on the brokers directly."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    configs = {"min.insync.replicas": "2"}
    futures = admin.create_topics(
        [
            NewTopic(RECORDS, 6, 3, config=configs),
            NewTopic(TARGET, 3, 3, config={**configs, "retention.ms": "3600000"}),
            NewTopic(PROTECTED, 3, 3, config=configs),
        ]
    )
    for future in futures.values():
        future.result(60)


def rates(phases: list[tuple[float, str]], latencies: dict[str, list[float]]) -> dict[str, float]:
    """Records acknowledged per second of each phase (by when they were sent)."""
    spent: dict[str, float] = {}
    for (at, name), (end, _) in itertools.pairwise(phases):
        spent[name] = spent.get(name, 0.0) + end - at
    return {
        name: round(len(latencies.get(name, [])) / seconds, 1)
        for name, seconds in spent.items()
        if seconds > 0
    }


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile, in milliseconds."""
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The whole soak; the report."""
    shape = QUICK if args.quick else FULL
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="soak-"))
    kafka = LocalKafka(work / "cluster", brokers=3, port_base=PORT_BASE, light_jvm=args.quick)
    phase = traffic.Phase()
    tally = traffic.Tally()
    phases: list[tuple[float, str]] = []
    started = time.monotonic()

    def enter(name: str) -> None:
        phase.set(name)
        phases.append((time.monotonic() - started, name))
        log(f"phase {name}")

    kafka.up(timeout=180)
    loop = asyncio.new_event_loop()
    loop_thread = threading.Thread(target=loop.run_forever, name="soak-loop", daemon=True)
    loop_thread.start()

    def on_loop(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop)

    proxy = None
    try:
        create_topics(kafka.bootstrap_servers)
        brokers = [
            (host, int(port))
            for host, _, port in (hp.rpartition(":") for hp in kafka.bootstrap_servers.split(","))
        ]
        # One relay per broker, so the proxy's bootstrap list has three servers, as it would.
        relays = [faults.StateRelay([broker]) for broker in brokers]
        relay_ports = [on_loop(relay.start()).result(10) for relay in relays]
        policy = work / "policy.yaml"
        shutil.copy(REPO / "examples" / "policy.yaml", policy)
        (work / "proxy").mkdir()
        proxy = ProxyProcess(
            work / "proxy",
            kafka.bootstrap_servers,
            BOOTSTRAP_PORT,
            NODE_PORT_BASE,
            {
                "workers": 2,
                "net": {"splice": args.splice},
                "policy": {"file": str(policy)},
                "admin": {"bind_host": "127.0.0.1", "port": ADMIN_PORT},
                "audit": {"file": str(work / "audit.jsonl")},
                "cluster_state": {
                    "bootstrap_servers": [f"127.0.0.1:{p}" for p in relay_ports],
                    "ttl_s": 1.0,
                    "request_timeout_s": STATE_TIMEOUT_S,
                },
            },
        )
        supervisor = proxy.process.pid
        sampler = faults.Sampler(supervisor, started)  # the phases' clock
        sampler.start()
        host, port = "127.0.0.1", BOOTSTRAP_PORT
        stop = asyncio.Event()
        background = [
            on_loop(traffic.idle_connections(host, port, shape.idle, tally, stop)),
            on_loop(traffic.slow_readers(host, port, shape.slow, tally, stop)),
            on_loop(traffic.connection_churn(host, port, shape.new_per_s, tally, stop)),
            on_loop(
                admin.admin_traffic(
                    host,
                    port,
                    admin.AdminTopics(TARGET, PROTECTED),
                    phase=phase,
                    tally=tally,
                    stop=stop,
                )
            ),
        ]
        seen: dict[tuple[int, int], str] = {}
        lock = threading.Lock()
        consumers = [
            traffic.VerifyingConsumer(proxy.bootstrap, RECORDS, f"soak-consumer-{i}", seen, lock)
            for i in (1, 2)
        ]
        producers = [
            traffic.VerifiedProducer(proxy.bootstrap, RECORDS, tag, shape.producer_rate, phase)
            for tag in (1, 2)
        ]
        java_config = work / "java-producer.properties"
        java_config.write_text("enable.idempotence=true\nacks=all\nlinger.ms=5\n")
        java = traffic.JavaVerifiableProducer(
            kafka.tool_command(
                "kafka-verifiable-producer",
                "--bootstrap-server",
                proxy.bootstrap,
                "--topic",
                RECORDS,
                "--throughput",
                str(shape.java_rate),
                "--max-messages",
                "-1",
                "--value-prefix",
                str(JAVA_TAG),
                "--producer.config",
                str(java_config),
            ),
            JAVA_TAG,
        )
        for thread in (*consumers, *producers):
            thread.start()
        enter("warmup")
        time.sleep(shape.warmup_s)
        quiet = threading.Lock()
        reloader = faults.Reloader(proxy, policy, shape.reload_every_s, quiet, ADMIN_PORT)
        reloader.start()
        deadline = started + args.minutes * 60

        def fault(name: str, action: Callable[[], None]) -> None:
            enter(name)
            action()
            enter("steady")
            time.sleep(shape.gap_s)

        fault("rolling-restart", lambda: faults.rolling_restart(kafka, shape.restart, log))
        fault(
            "controller-crash", lambda: faults.crash_controller(kafka, shape.controller_down_s, log)
        )
        fault("election", lambda: faults.elect_leaders(kafka, log))

        def hang() -> None:
            phase.state_unreadable_until = time.monotonic() + shape.hang_s + STATE_TIMEOUT_S + 5.0
            on_loop(faults.hang_all(relays, shape.hang_s)).result(shape.hang_s + 30)

        fault("state-hang", hang)

        def replace_worker() -> None:
            with quiet:
                killed = faults.kill_worker(supervisor, log)
                faults.wait_for_workers(supervisor, 2, killed, ADMIN_PORT, log)

        fault("worker-kill", replace_worker)
        while time.monotonic() < deadline:
            time.sleep(1)
        enter("drain")
        reloader.stopping.set()
        reloader.join(60)
        for producer in producers:
            producer.stop()
        java.stop()
        for producer in producers:
            producer.join(180)
        acked = {p.tag: set(p.acked) for p in producers} | {JAVA_TAG: set(java.acked)}
        wait_until = time.monotonic() + 120
        while time.monotonic() < wait_until:
            with lock:
                verdict = traffic.verify(acked, dict(seen))
            if verdict.lost == 0:
                break
            time.sleep(2)
        for consumer in consumers:
            consumer.stopping.set()
            consumer.join(60)
        on_loop(_set(stop)).result(10)
        for future in background:
            future.result(120)
        try:
            metrics = faults.scrape(ADMIN_PORT)
        except OSError:
            metrics = ""  # the proxy is down: failures() says so
        sampler.stopping.set()
        sampler.join(10)
        with lock:
            verdict = traffic.verify(acked, dict(seen))
        exit_code = proxy.stop(60)
        proxy = None
        faults.chart(sampler.samples, phases, out / "soak-rss.png")
        faults.write_samples(sampler.samples, out / "samples.csv")
        elapsed = time.monotonic() - started
        latencies: dict[str, list[float]] = {}
        for producer in producers:
            for name, values in producer.latencies.items():
                latencies.setdefault(name, []).extend(values)
        warm = next((at for at, name in phases if name != "warmup"), 0.0)
        after_warmup = [s for s in sampler.samples if s[0] > warm]
        rss = [s[1] for s in after_warmup]
        early = statistics.median(rss[: max(1, len(rss) // 5)]) if rss else 0.0
        late = statistics.median(rss[-max(1, len(rss) // 5) :]) if rss else 0.0
        total_acked = sum(len(p.acked) for p in producers)
        report = {
            "minutes": round(elapsed / 60, 1),
            "splice": args.splice,
            "shape": asdict(shape),
            "records": {
                "sent": sum(p.sent for p in producers),
                "acknowledged": verdict.acked,
                "consumed_offsets": verdict.consumed,
                "lost": verdict.lost,
                "duplicated": verdict.duplicated,
                "misordered": verdict.misordered,
                "lost_sample": verdict.lost_sample,
                "send_failures": {str(p.tag): dict(p.failed) for p in producers}
                | {str(JAVA_TAG): java.failed},
            },
            "throughput": {
                "records_per_s_by_phase": rates(phases, latencies),
                "whole_run_records_per_s": round(total_acked / elapsed, 1),
                "confluent_target_per_s": 2 * shape.producer_rate,
            },
            "misordered_responses": tally.misordered_responses,
            "wrong_decisions": tally.wrong_decisions[:50],
            "wrong_decision_count": len(tally.wrong_decisions),
            "fail_closed_denials_during_hang": tally.fail_closed_denials,
            "admin_rounds": tally.admin_rounds,
            "broker_errors": dict(tally.broker_errors),
            "reconnects": dict(tally.reconnects),
            "new_connections": tally.new_connections,
            "new_connection_failures": tally.new_connection_failures,
            "reloads": reloader.reloads,
            "reload_mismatches": reloader.mismatches,
            "produce_latency_ms": {
                name: {
                    "p50": round(percentile(v, 0.5), 2),
                    "p99": round(percentile(v, 0.99), 2),
                    "n": len(v),
                }
                for name, v in latencies.items()
            },
            "rss_mib": {
                "after_warmup": round(early, 1),
                "end": round(late, 1),
                "peak": round(max(rss, default=0.0), 1),
            },
            "open_files_peak": max((s[2] for s in sampler.samples), default=0),
            "metrics": {
                name: faults.metric_total(metrics, name)
                for name in (
                    "kpp_requests_total",
                    "kpp_decisions_total",
                    "kpp_connections_total",
                    "kpp_policy_reloads_total",
                    "kpp_cluster_state_requests_total",
                    "kpp_upstream_connect_failures_total",
                    "kpp_audit_events_total",
                )
            },
            "phases": [(round(at, 1), name) for at, name in phases],
            "proxy_exit_code": exit_code,
        }
        return report
    finally:
        if proxy is not None:
            proxy.stop(30)
        loop.call_soon_threadsafe(loop.stop)
        kafka.down()
        for name in ("proxy.log", "audit.jsonl"):
            for found in work.rglob(name):
                shutil.copy(found, out / name)
        shutil.rmtree(work, ignore_errors=True)


async def _set(event: asyncio.Event) -> None:
    event.set()


def failures(report: dict[str, Any]) -> list[str]:
    """What makes the run fail."""
    found = [
        f"{key}: {report['records'][key]}"
        for key in ("lost", "duplicated", "misordered")
        if report["records"][key]
    ]
    if report["misordered_responses"]:
        found.append(f"misordered responses: {report['misordered_responses']}")
    if report["wrong_decision_count"]:
        first = "; ".join(report["wrong_decisions"][:3])
        found.append(f"wrong decisions: {report['wrong_decision_count']} (first: {first})")
    if not report["fail_closed_denials_during_hang"]:
        found.append("no decision failed closed while the cluster state hung")
    if report["reload_mismatches"] or not report["reloads"]:
        found.append(f"reloads: {report['reloads']}, mismatches {report['reload_mismatches']}")
    if report["proxy_exit_code"] != 0:
        found.append(f"the proxy exited {report['proxy_exit_code']} on SIGTERM")
    return found


def main() -> int:
    """Run, write the report, say what failed."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument(
        "--quick", action="store_true", help="the short variant the test suite runs"
    )
    parser.add_argument(
        "--splice", action="store_true", help="the proxy with net.splice on (spliced bodies)"
    )
    parser.add_argument("--out", default="soak-report", help="where the report goes")
    args = parser.parse_args()
    report = run(args)
    (Path(args.out) / "soak.json").write_text(json.dumps(report, indent=2) + "\n")
    problems = failures(report)
    print(json.dumps(report, indent=2))
    for problem in problems:
        log(f"FAILED: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
