"""The latency the proxy's own hop adds to a single-record Produce, without Kafka.

A fake broker (bench.splice_bench's: answers at once, from its own threads) stands in for
Kafka, so the broker's time and its noise on a shared machine are out of the figure. One
client connection per path sends a 1 KiB Produce, waits for its answer, and sends the next
(TCP_NODELAY, one in flight), `--samples` times per path per round, the paths in turn; the
first round is a warm-up. Paths: direct to the fake broker, the proxy (this tree, no policy),
the uvloop byte relay of bench/peers/ (the hop with nothing else), and with `--baseline DIR`
the proxy of another checkout. Added = a path's median minus direct's.

Usage: python -m bench.hop_latency [--rounds R] [--samples N] [--port-base P] [--baseline DIR]
Ports: P (the fake broker), P+1 (the relay), P+10/P+11 and P+13/P+14 (the proxies and their
node listeners); P=19460.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.splice_bench import PRODUCE, FakeBroker, Relay, read_into, request_frame
from bench.throughput import percentile
from harness.proxy_process import ProxyProcess

RECORD = bytes(1024)


def round_trips(conn: socket.socket, samples: int, sink: bytearray) -> list[float]:
    """Milliseconds of each of `samples` Produce round trips, one in flight."""
    body = b"\x00" + struct.pack(">hi", 1, 30000) + RECORD
    times = []
    for n in range(samples):
        request = request_frame(PRODUCE, 9, n, body)
        started = time.perf_counter()
        conn.sendall(request)
        head = read_into(conn, 4)
        assert head is not None, "the connection closed"
        assert read_into(conn, struct.unpack(">i", head)[0], sink) is not None
        times.append((time.perf_counter() - started) * 1000)
    return times


def main() -> None:
    """Run the rounds and print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--samples", type=int, default=500, help="per path per round")
    parser.add_argument("--port-base", type=int, default=19460)
    parser.add_argument("--baseline", type=Path, help="a checkout whose proxy runs too")
    args = parser.parse_args()
    base = args.port_base
    FakeBroker(base, 1 << 16)  # serves from its own threads until exit
    work = Path(tempfile.mkdtemp(prefix="kpp-hop-latency-"))
    stops: list[Any] = []
    ports = {"direct": base}
    try:
        trees = [("proxy", base + 10, None)]
        if args.baseline is not None:
            trees.append(("baseline", base + 13, {"PYTHONPATH": str(args.baseline.resolve())}))
        for name, port, env in trees:
            workdir = work / name
            workdir.mkdir()
            stops.append(ProxyProcess(workdir, f"127.0.0.1:{base}", port, port, {}, env=env))
            ports[name] = port
        stops.append(Relay("relay.py", base + 1, base))
        ports["uvloop relay"] = base + 1
        conns = {name: socket.create_connection(("127.0.0.1", p)) for name, p in ports.items()}
        for conn in conns.values():
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sink = bytearray(1 << 17)
        times: dict[str, list[float]] = {name: [] for name in conns}
        for round_ in range(args.rounds + 1):
            names = list(conns)
            shift = round_ % len(names)
            for name in names[shift:] + names[:shift]:
                taken = round_trips(conns[name], args.samples, sink)
                if round_:  # round 0 warms every path up
                    times[name] += taken
        for conn in conns.values():
            conn.close()
    finally:
        for target in stops:
            target.stop()
    direct = statistics.median(times["direct"])
    print("| path | p50 ms | added p50 ms | p99 ms |")
    print("|---|---|---|---|")
    for name, taken in times.items():
        p50 = statistics.median(taken)
        print(f"| {name} | {p50:.3f} | {p50 - direct:+.3f} | {percentile(taken, 99):.3f} |")
    print(f"{len(times['direct'])} round trips per path", file=sys.stderr)


if __name__ == "__main__":
    main()
