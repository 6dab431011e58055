"""A canary's creates and produces while one hostile client floods the proxy (issue 31).

Usage: python -m bench.admission [--seconds S] [--workers 1 2] [--floods validate ...]
                                 [--baseline TREE]
Starts its own cluster (ports 26092+) and, per row, one proxy (26700+; the baseline's 26720+)
enforcing examples/policy.yaml with the default config. Each row runs one flood for S
seconds while a canary creates one topic every 100 ms on its own connection (raw CreateTopics
v7, 3 partitions, RF 3) and a producer (librdkafka, acks=all) sends one record every 20 ms;
p50/p99 of each, and how many creates finished. Floods (scaled to run on a small machine):
- none: the canary alone;
- validate: 10 connections looping CreateTopics validate_only of 5,000 allowed topics (the
  proxy forwards them: the brokers' controller is loaded as by a direct client);
- validate_denied: the same with names the policy denies (the proxy's own cost alone);
- delete_ids: 20 connections looping DeleteTopics v6 of 1,000 random topic ids;
- partial: 50 connections each sending 90% of a 20 MiB frame, then stalling.
`--baseline TREE` runs another checkout's proxy the same way (`git worktree add`), so a
change is measured against what it replaces in one run.
"""

from __future__ import annotations

import argparse
import importlib
import socket
import struct
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.admin_latency import create_request
from bench.throughput import baseline_proxy, percentile
from harness.local_kafka import LocalKafka
from harness.messages import build
from harness.proxy_process import ProxyProcess
from harness.wire import WireClient
from kafka_policy_proxy.codec.framing import framed
from kafka_policy_proxy.codec.header import request_header
from kafka_policy_proxy.codec.registry import encode, request_class

REPO = Path(__file__).resolve().parents[1]
PORT_BASE = 26092
PROXY_PORT = 26700
BASELINE_PORT = 26720
FLOODS = ("none", "validate", "validate_denied", "delete_ids", "partial")
CANARY_EVERY_S = 0.1
PRODUCE_EVERY_S = 0.02
PARTIAL_FRAME = 20 << 20


def validate_frame(pattern: str = "flood.t{:05d}") -> bytes:
    """CreateTopics v7 validate_only of 5,000 topics (the default names are allowed)."""
    message = create_request([pattern.format(i) for i in range(5000)], validate_only=True)
    return framed(request_header(19, 7, 1, "flood"), encode(message))


def delete_ids_frame() -> bytes:
    """DeleteTopics v6 of 1,000 random topic ids, none of which exists."""
    cls = request_class(20, 6)
    m = importlib.import_module(cls.__module__)
    topics = tuple(build(m.DeleteTopicState, name=None, topic_id=uuid.uuid4()) for _ in range(1000))
    return framed(
        request_header(20, 6, 1, "flood"), encode(build(cls, topics=topics, timeout=30_000))
    )


class Flood:
    """Attacker connections that run until stopped."""

    def __init__(self, kind: str, port: int) -> None:
        self._stop = threading.Event()
        self.answered = 0
        self._threads: list[threading.Thread] = []
        if kind == "validate":
            self._loop(validate_frame(), port, 10)
        elif kind == "validate_denied":
            self._loop(validate_frame("Flood_T{:05d}"), port, 10)
        elif kind == "delete_ids":
            self._loop(delete_ids_frame(), port, 20)
        elif kind == "partial":
            for _ in range(50):
                self._start(lambda: self._partial(port))

    def _start(self, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _loop(self, frame: bytes, port: int, connections: int) -> None:
        def run() -> None:
            try:
                wire = WireClient("127.0.0.1", port, timeout=300)
                while not self._stop.is_set():
                    wire.send_raw(frame)
                    wire.read_frame()
                    self.answered += 1
                wire.close()
            except OSError:
                pass  # closed by the proxy: the flood on this connection is over

        for _ in range(connections):
            self._start(run)

    def _partial(self, port: int) -> None:
        chunk = b"\0" * (1 << 20)
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=300) as sock:
                sock.sendall(struct.pack(">i", PARTIAL_FRAME))
                sent = 0
                while sent < PARTIAL_FRAME * 9 // 10 and not self._stop.is_set():
                    sock.sendall(chunk)
                    sent += len(chunk)
                self._stop.wait()
        except OSError:
            pass  # refused or closed by the proxy

    def stop(self) -> None:
        """Stop every attacker (a blocked one ends when the proxy stops)."""
        self._stop.set()


def canary(port: int, seconds: float, created: list[str]) -> list[float]:
    """Seconds per create of one topic, one every 100 ms (or as soon as the last returns)."""
    wire = WireClient("127.0.0.1", port, timeout=300)
    latencies = []
    begin = tick = time.monotonic()
    while time.monotonic() - begin < seconds:
        name = f"canary.c{uuid.uuid4().hex[:10]}"
        sent = time.monotonic()
        response = wire.request(create_request([name], validate_only=False))
        latencies.append(time.monotonic() - sent)
        if int(response.topics[0].error_code) == 0:
            created.append(name)
        tick = max(tick + CANARY_EVERY_S, time.monotonic())
        time.sleep(max(0.0, tick - time.monotonic()))
    wire.close()
    return latencies


def produce(bootstrap: str, topic: str, seconds: float, out: list[float]) -> None:
    """Seconds from send to acknowledgement (acks=all) of one record every 20 ms."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "log_level": 3}
    )

    def acked(sent: float) -> Callable[[Any, Any], None]:
        return lambda err, msg: out.append(time.monotonic() - sent) if err is None else None

    producer.produce(topic, b"warm-up")  # metadata and connections before any timing
    producer.flush(60)
    begin = time.monotonic()
    while time.monotonic() - begin < seconds:
        producer.produce(topic, b"x" * 100, on_delivery=acked(time.monotonic()))
        producer.poll(PRODUCE_EVERY_S)
    producer.flush(60)


def row(proxy: ProxyProcess, kafka: Any, kind: str, seconds: float) -> dict[str, Any]:
    """One flood against one proxy: the canary's and the producer's figures."""
    flood = Flood(kind, proxy.bootstrap_port)
    time.sleep(2)  # the flood is under way before the canary starts
    created: list[str] = []
    produced: list[float] = []
    producer = threading.Thread(
        target=produce, args=(proxy.bootstrap, "bench.produce", seconds, produced)
    )
    producer.start()
    latencies = canary(proxy.bootstrap_port, seconds, created)
    producer.join()
    answered = flood.answered
    flood.stop()
    rss = _rss_mib(proxy)
    if created:
        AdminClient({"bootstrap.servers": kafka.bootstrap_servers}).delete_topics(created)
    return {
        "creates": len(latencies),
        "ok": len(created),
        "create": latencies,
        "produce": produced,
        "flood": answered,
        "rss": rss,
    }


def _rss_mib(proxy: ProxyProcess) -> float:
    """The proxy process's VmHWM (peak RSS), MiB, its workers included."""
    pids = [proxy.process.pid]
    children = Path(f"/proc/{proxy.process.pid}/task/{proxy.process.pid}/children")
    if children.exists():
        pids += [int(p) for p in children.read_text().split()]
    total = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                total += int(line.split()[1])
    return total / 1024


def _ms(values: list[float], q: float) -> str:
    return f"{percentile(values, q) * 1000:.0f}" if values else "n/a"


def main() -> None:
    """Every flood, for each worker count and tree; prints one Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--floods", nargs="+", choices=FLOODS, default=list(FLOODS))
    parser.add_argument("--baseline", type=Path, help="an older checkout run the same way")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kpp-admission-bench-"))
    kafka = LocalKafka(work / "cluster", brokers=3, port_base=PORT_BASE)
    kafka.up(timeout=180)
    try:
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
        admin.create_topics([NewTopic("bench.produce", 3, 3)])["bench.produce"].result()
        run(kafka, args, work)
    finally:
        kafka.down()


def run(kafka: Any, args: argparse.Namespace, work: Path) -> None:
    """One row per tree, worker count and flood, each with a fresh proxy."""
    trees: list[tuple[str, Path | None]] = [("this tree", None)]
    if args.baseline is not None:
        trees.append((f"baseline {args.baseline.name}", args.baseline))
    print(
        "| proxy | workers | flood | creates (ok) | create p50 ms | create p99 ms "
        "| produce p50 ms | produce p99 ms | flood requests answered | peak RSS MiB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n, (label, tree) in enumerate(trees):
        for workers in args.workers:
            for kind in args.floods:
                config = {
                    "policy": {"file": str(REPO / "examples" / "policy.yaml"), "watch": False},
                    "workers": workers,
                }
                rundir = work / f"{n}-{workers}-{kind}"
                rundir.mkdir()
                if tree is None:
                    proxy = ProxyProcess(
                        rundir, kafka.bootstrap_servers, PROXY_PORT, PROXY_PORT + 100, config
                    )
                else:
                    proxy = baseline_proxy(
                        rundir, kafka.bootstrap_servers, tree, BASELINE_PORT, config
                    )
                try:
                    r = row(proxy, kafka, kind, args.seconds)
                finally:
                    proxy.stop()
                print(
                    f"| {label} | {workers} | {kind} | {r['creates']} ({r['ok']}) "
                    f"| {_ms(r['create'], 50)} | {_ms(r['create'], 99)} "
                    f"| {_ms(r['produce'], 50)} | {_ms(r['produce'], 99)} "
                    f"| {r['flood']} | {r['rss']:.0f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
