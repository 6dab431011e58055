"""Produce and consume 1 KiB records direct and through the proxy, alternating, in one run.

Throughput comes from Kafka's own kafka-producer-perf-test and kafka-consumer-perf-test (the
same jars as the cluster); latency from single librdkafka produce round trips.

Usage: python -m bench.throughput [--records N] [--repeats R] [--latency-samples S]
                                 [--baseline TREE] [--mode plain|tls|workers]
                                 [--peer kroxylicious] [--threads T] [--floor]
                                 [--splice] [--port-base P]
Starts its own cluster (harness/local_kafka/) and proxy on ports 23092+ and 23400+; with
`--port-base P`, everything in P..P+99 instead (the cluster's listeners 10 ports apart).
Each round runs every target once, the order rotated from round to round; ratios to direct
are taken per round, then the median over rounds.
`--peer kroxylicious`: Kroxylicious 0.12.0 with no filters (bench/peers/kroxylicious) on
ports 23950+, with `-XX:ActiveProcessorCount=T` (its Netty worker threads); our proxy runs
with T workers (one process when T is 1).
`--floor`: a bare uvloop byte relay (bench/peers/relay.py) on ports 23900+, in front of a
RELAY listener of each broker that advertises the relay's ports: the Python floor; and, on
the same ports in turn (each is started for its turn only), a relay moving every byte with
splice(2) (bench/peers/splice_relay.py): the kernel floor.
`--splice`: the proxy with `net.splice: true` beside the same proxy with it off (ports
23700+), in the same rotation.
`--baseline TREE` also runs the proxy from another checkout (e.g. the previous commit, from
`git worktree add`) on ports 23600+, in the same rotation, so a change is measured against
what it replaces in one run.
`--mode tls`: clients speak TLS, direct to the brokers' SSL listener and to the proxy's TLS
listener, which re-originates TLS to the same SSL listener (and so does `--baseline`'s).
`--mode workers`: the proxy with one worker and with two (`--workers 2`, ports 23800+).
CPU per GB counts the proxy's processes (a supervisor and its workers).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from harness.local_kafka import LocalKafka
from harness.proxy_process import ProxyProcess
from harness.throwaway_ca import ThrowawayCa

BROKERS = 3


@dataclass(frozen=True)
class Ports:
    """Where each target listens: a proxy at `x` serves node N on `x + N` (compact) or on
    `x + 100 + N`."""

    cluster: int = 23092
    stride: int = 100  # between the cluster's kinds of listener
    proxy: int = 23400
    splice_off: int = 23700
    baseline: int = 23600
    workers: int = 23800
    relay: int = 23900
    kroxylicious: int = 23950
    node_offset: int = 100

    @classmethod
    def compact(cls, base: int) -> Ports:
        """Everything in base..base+99: the cluster in the first 70, then 4 ports a target."""
        return cls(base, 10, base + 70, base + 74, base + 78, base + 82, base + 86, base + 90, 0)


PORTS = Ports()

RECORD = b"x" * 1024
QUIET = {"log_level": 3}


def create_topic(bootstrap: str, partitions: int, client: dict[str, Any] | None = None) -> str:
    """A fresh topic for one measurement, created with the client's settings (TLS)."""
    name = f"bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(
        {"bootstrap.servers": bootstrap, **(client or {}).get("librdkafka", {}), **QUIET}
    )
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(30)
    time.sleep(1)
    return name


def perf_produce(
    kafka: Any, bootstrap: str, topic: str, records: int, config: Path | None = None
) -> float:
    """kafka-producer-perf-test: records/s for 1 KiB records as fast as the producer can."""
    out = _tool(
        kafka,
        "kafka-producer-perf-test",
        *(["--producer.config", str(config)] if config else []),
        "--topic",
        topic,
        "--num-records",
        str(records),
        "--record-size",
        "1024",
        "--throughput",
        "-1",
        "--producer-props",
        f"bootstrap.servers={bootstrap}",
        "acks=all",
        "linger.ms=5",
        "batch.size=262144",
    )
    # "... 300000 records sent, 61312.1 records/sec (59.88 MB/sec), ..."
    return float(out.strip().splitlines()[-1].split(",")[1].split()[0])


def perf_consume(
    kafka: Any, bootstrap: str, topic: str, records: int, config: Path | None = None
) -> float:
    """kafka-consumer-perf-test: fetch records/s (group join time excluded)."""
    out = _tool(
        kafka,
        "kafka-consumer-perf-test",
        *(["--consumer.config", str(config)] if config else []),
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--messages",
        str(records),
        "--timeout",
        "120000",
    )
    return float(out.strip().splitlines()[-1].split(",")[9])


def _tool(kafka: Any, name: str, *args: str) -> str:
    result = subprocess.run(
        kafka.tool_command(name, *args), capture_output=True, text=True, timeout=600, check=True
    )
    return result.stdout


def produce_latency(
    bootstrap: str, topic: str, samples: int, client: dict[str, Any] | None = None
) -> list[float]:
    """Milliseconds from produce() to acknowledgement, one record in flight at a time."""
    settings = {"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all", **QUIET}
    producer = Producer({**settings, **(client or {})})
    producer.produce(topic, RECORD)
    producer.flush(30)
    latencies = []
    for _ in range(samples):
        start = time.perf_counter()
        producer.produce(topic, RECORD)
        producer.flush(30)
        latencies.append((time.perf_counter() - start) * 1000)
    return latencies


def process_tree(pid: int) -> list[int]:
    """A process and its live children (a proxy's supervisor and its workers)."""
    children = subprocess.run(
        ["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False
    ).stdout.split()
    return [pid, *map(int, children)]


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds a process and its live children have used so far."""
    total = 0.0
    for one in process_tree(pid):
        fields = Path(f"/proc/{one}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def peak_rss_mb(pid: int) -> float:
    """Peak resident memory (VmHWM) of a process plus its live children, in MB."""
    total = 0
    for one in process_tree(pid):
        for line in Path(f"/proc/{one}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                total += int(line.split()[1])
    return total / 1024


def threads(pid: int) -> int:
    """OS threads of a process plus its live children."""
    return sum(len(list(Path(f"/proc/{one}/task").iterdir())) for one in process_tree(pid))


def tls_setup(
    work: Path, kafka: Any, ports: Ports = PORTS
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The proxy's TLS sections, and per target: a client properties file and librdkafka
    settings (direct clients trust the cluster's CA, proxy clients the listener's)."""
    ca = ThrowawayCa(work / "listener-ca", "listener-ca")
    listener = ca.issue("listener", server=True)
    clients = {}
    for target, trusted in (("direct", kafka.tls_files.ca), ("proxy", ca.cert)):
        props = work / f"{target}-client.properties"
        props.write_text(
            f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={trusted}\n"
        )
        librdkafka = {"security.protocol": "SSL", "ssl.ca.location": str(trusted)}
        clients[target] = {"properties": props, "librdkafka": librdkafka}
    extra = {
        "upstream": {
            "bootstrap_servers": kafka.ssl_bootstrap_servers.split(","),
            "tls": {"ca_file": str(kafka.tls_files.ca)},
        },
        "listeners": {
            "bind_host": "127.0.0.1",
            "advertised_host": "127.0.0.1",
            "bootstrap_port": ports.proxy,
            "broker_port_base": ports.proxy + ports.node_offset,
            "tls": {"cert_file": str(listener.cert), "key_file": str(listener.key)},
        },
    }
    return extra, clients


def baseline_proxy(
    work: Path,
    upstream: str,
    tree: Path,
    port: int = PORTS.baseline,
    extra: dict[str, Any] | None = None,
    *,
    node_offset: int = PORTS.node_offset,
) -> ProxyProcess:
    """The proxy of another checkout, run from this venv with that tree first on the path."""
    workdir = work / "baseline"
    workdir.mkdir()
    env = {"PYTHONPATH": str(tree.resolve())}
    return ProxyProcess(workdir, upstream, port, port + node_offset, extra, env=env)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) by nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


class Relay:
    """A byte-relay floor (bench/peers/`script`), one port per broker plus a bootstrap port;
    the floors share their ports, so each runs only for its turn (`start_turn`/`end_turn`)."""

    def __init__(self, kafka: Any, script: str = "relay.py", port: int = PORTS.relay) -> None:
        self._pairs = [f"{port}:{kafka.relay_listener_port(1)}"]
        self._pairs += [f"{port + n}:{kafka.relay_listener_port(n)}" for n in range(1, BROKERS + 1)]
        self._script = Path(__file__).resolve().parent / "peers" / script
        self.process: subprocess.Popen[str] | None = None
        self.bootstrap = f"127.0.0.1:{port}"
        self.peak_rss = 0.0

    def start_turn(self) -> None:
        """Start the relay."""
        self.process = subprocess.Popen(
            [sys.executable, str(self._script), *self._pairs], stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != "relay ready":
            raise RuntimeError("the relay did not start")

    def end_turn(self) -> None:
        """Stop the relay."""
        self.stop()

    def stop(self) -> None:
        """Stop the relay, if it runs."""
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)
            self.process = None


def start_targets(
    args: argparse.Namespace, work: Path, kafka: Any, proxies: dict[str, Any]
) -> tuple[str, dict[str, dict[str, Any]]]:
    """Start the proxies into `proxies` (anything with .process, .bootstrap and .stop) by name;
    return the direct bootstrap servers and the per-target client settings (TLS)."""
    ports: Ports = args.ports
    nodes = ports.node_offset
    if args.mode == "tls":
        extra, clients = tls_setup(work, kafka, ports)
        proxies["proxy"] = ProxyProcess(work, "", ports.proxy, ports.proxy + nodes, extra)
        if args.baseline is not None:  # the same TLS listener and upstream, on its own ports
            listeners = extra["listeners"] | {
                "bootstrap_port": ports.baseline,
                "broker_port_base": ports.baseline + nodes,
            }
            proxies["baseline"] = baseline_proxy(
                work,
                "",
                args.baseline,
                ports.baseline,
                extra | {"listeners": listeners},
                node_offset=nodes,
            )
            clients["baseline"] = clients["proxy"]
        return kafka.ssl_bootstrap_servers, clients
    ours: dict[str, Any] = {"workers": args.threads} if args.threads > 1 else {}
    upstream = kafka.bootstrap_servers
    if args.splice:
        off = work / "splice-off"
        off.mkdir()
        proxies["proxy"] = ProxyProcess(
            off, upstream, ports.splice_off, ports.splice_off + nodes, {**ours, "net": {}}
        )
        ours["net"] = {"splice": True}
        name = "proxy-splice"
    else:
        name = "proxy"
    proxies[name] = ProxyProcess(work, upstream, ports.proxy, ports.proxy + nodes, ours or None)
    if args.mode == "workers":
        two = work / "two-workers"
        two.mkdir()
        proxies["proxy-2-workers"] = ProxyProcess(
            two, upstream, ports.workers, ports.workers + nodes, {"workers": 2}
        )
    if args.floor:
        proxies["relay"] = Relay(kafka, "relay.py", ports.relay)
        proxies["splice-relay"] = Relay(kafka, "splice_relay.py", ports.relay)
    if args.peer == "kroxylicious":
        from bench.peers.kroxylicious.peer import KroxyliciousProcess

        proxies["kroxylicious"] = KroxyliciousProcess(
            work, upstream, ports.kroxylicious, range(1, BROKERS + 1), args.threads
        )
    if args.baseline is not None:
        proxies["baseline"] = baseline_proxy(
            work, upstream, args.baseline, ports.baseline, node_offset=nodes
        )
    return upstream, {}


def main() -> None:
    """Run the benchmark and print Markdown tables plus the raw JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--latency-samples", type=int, default=2000)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="a checkout whose proxy runs alongside")
    parser.add_argument("--mode", choices=("plain", "tls", "workers"), default="plain")
    parser.add_argument("--peer", choices=("kroxylicious",), help="a peer proxy run alongside")
    parser.add_argument("--threads", type=int, default=1, help="our workers = the peer's threads")
    parser.add_argument("--floor", action="store_true", help="run the byte-relay floors alongside")
    parser.add_argument("--splice", action="store_true", help="net.splice on and off, alongside")
    parser.add_argument("--port-base", type=int, help="every port in PORT_BASE..PORT_BASE+99")
    args = parser.parse_args()
    args.ports = PORTS if args.port_base is None else Ports.compact(args.port_base)
    if args.mode == "tls" and (args.peer or args.floor or args.threads > 1):
        parser.error("--mode tls runs only our proxy")
    work = Path(tempfile.mkdtemp(prefix="kpp-bench-"))
    ports: Ports = args.ports
    relay_ports = {n: ports.relay + n for n in range(1, BROKERS + 1)} if args.floor else None
    kafka = LocalKafka(
        work / "cluster",
        brokers=BROKERS,
        port_base=ports.cluster,
        port_stride=ports.stride,
        relay_ports=relay_ports,
    )
    kafka.up(timeout=420)
    proxies: dict[str, Any] = {}
    try:
        direct, clients = start_targets(args, work, kafka, proxies)
        targets = {"direct": direct, **{n: p.bootstrap for n, p in proxies.items()}}
        results = run_rounds(args, kafka, targets, proxies, clients)
    finally:
        for proxy in proxies.values():
            proxy.stop()
        kafka.down()
    report(args, results, proxies)


def run_rounds(
    args: argparse.Namespace,
    kafka: Any,
    targets: dict[str, str],
    proxies: dict[str, Any],
    clients: dict[str, dict[str, Any]],
) -> dict[str, dict[str, list[float]]]:
    """Warm every target up, then run the rounds, each in a rotated order."""
    keys = ("produce_rps", "consume_rps", "latency_ms", "cpu_s_per_gb", "peak_rss_mb", "threads")
    results: dict[str, dict[str, list[float]]] = {t: {k: [] for k in keys} for t in targets}
    for target, bootstrap in targets.items():  # warm-up: JIT, connections, page cache
        client = clients.get(target, {})
        _turn(proxies.get(target), "start_turn")
        topic = create_topic(bootstrap, args.partitions, client)
        perf_produce(kafka, bootstrap, topic, args.records // 5, client.get("properties"))
        _turn(proxies.get(target), "end_turn")
    names = list(targets)
    for repeat in range(args.repeats):
        shift = repeat % len(names)
        for target in names[shift:] + names[:shift]:
            bootstrap = targets[target]
            client = clients.get(target, {})
            config = client.get("properties")
            _turn(proxies.get(target), "start_turn")
            topic = create_topic(bootstrap, args.partitions, client)
            r = results[target]
            pid = proxies[target].process.pid if target in proxies else None
            before = 0.0 if pid is None else cpu_seconds(pid)
            r["produce_rps"].append(perf_produce(kafka, bootstrap, topic, args.records, config))
            r["consume_rps"].append(perf_consume(kafka, bootstrap, topic, args.records, config))
            if pid is not None:
                moved_gb = 2 * args.records * len(RECORD) / 1e9  # produced, then consumed
                r["cpu_s_per_gb"].append((cpu_seconds(pid) - before) / moved_gb)
            lat_topic = create_topic(bootstrap, 1, client)
            r["latency_ms"] += produce_latency(
                bootstrap, lat_topic, args.latency_samples, client.get("librdkafka")
            )
            if pid is not None:
                r["peak_rss_mb"].append(peak_rss_mb(pid))
                r["threads"].append(threads(pid))
            _turn(proxies.get(target), "end_turn")
            print(
                f"round {repeat + 1} {target}: produce {r['produce_rps'][-1]:,.0f}/s "
                f"consume {r['consume_rps'][-1]:,.0f}/s",
                file=sys.stderr,
            )
    return results


def _turn(target: Any, step: str) -> None:
    # A target that runs only for its turn (the relay floors, which share ports).
    if hasattr(target, step):
        getattr(target, step)()


def report(
    args: argparse.Namespace, results: dict[str, dict[str, list[float]]], proxies: dict[str, Any]
) -> None:
    """Print the tables: rates and latency, per-round ratios to direct, CPU, memory, threads."""
    d = results["direct"]
    print(
        "| path | produce rec/s | produce MB/s | consume rec/s | consume MB/s "
        "| produce p50 ms | produce p99 ms |"
    )
    print("|---|---|---|---|---|---|---|")
    for target, r in results.items():
        produce, consume = statistics.median(r["produce_rps"]), statistics.median(r["consume_rps"])
        print(
            f"| {target} | {produce:,.0f} | {produce * len(RECORD) / 1e6:.1f} | {consume:,.0f} | "
            f"{consume * len(RECORD) / 1e6:.1f} | {percentile(r['latency_ms'], 50):.2f} | "
            f"{percentile(r['latency_ms'], 99):.2f} |"
        )
    print(
        "\n| proxy | produce / direct, median | per round | consume / direct, median "
        "| per round | p50 added ms |"
    )
    print("|---|---|---|---|---|---|")
    for name in proxies:
        r = results[name]
        ratios = {
            k: [a / b for a, b in zip(r[k], d[k], strict=True)]
            for k in ("produce_rps", "consume_rps")
        }
        added = percentile(r["latency_ms"], 50) - percentile(d["latency_ms"], 50)
        print(
            f"| {name} | {statistics.median(ratios['produce_rps']):.2f} | "
            f"{', '.join(f'{x:.2f}' for x in ratios['produce_rps'])} | "
            f"{statistics.median(ratios['consume_rps']):.2f} | "
            f"{', '.join(f'{x:.2f}' for x in ratios['consume_rps'])} | {added:+.2f} |"
        )
    print(
        "\n| proxy | CPU s per GB moved (produce + consume), median | per round "
        "| peak RSS MB | threads |"
    )
    print("|---|---|---|---|---|")
    for name in proxies:
        r = results[name]
        cpu = r["cpu_s_per_gb"]
        print(
            f"| {name} | {statistics.median(cpu):.2f} | {', '.join(f'{c:.2f}' for c in cpu)} | "
            f"{max(r['peak_rss_mb']):.0f} | {max(r['threads']):.0f} |"
        )
    print(json.dumps({"args": vars(args), "raw": results}, default=str), file=sys.stderr)


if __name__ == "__main__":
    main()
