"""CPU per GB of the proxy's pass-through path, net.splice on against off, without Kafka.

A fake broker (one thread per connection, blocking sockets) answers each Fetch with a body of
the size asked for, sent from one buffer, and reads each Produce into one buffer; a client
sends pipelined Fetch and Produce requests of `--body-mib` each and reads the answers into one
buffer. So nearly all the CPU the proxy process spends is its own pass-through path. Targets,
alternating round by round: the proxy with net.splice off (the copying path), with it on,
and the two byte-relay floors of bench.throughput (bench/peers/relay.py, a uvloop relay, and
bench/peers/splice_relay.py, splice for every byte).

`--baseline DIR` adds a proxy with net.splice on run from another checkout (before and after
a change, in the same run).

Usage: python -m bench.splice_bench [--rounds R] [--gib G] [--body-mib M] [--port-base P]
[--baseline DIR]
Ports: P (the fake broker), P+1..P+2 (relays), P+10, P+13 and P+16 (the proxies, each with its
node listener on the next port); P=19380.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.throughput import cpu_seconds, peak_rss_mb
from harness.messages import single_broker_metadata
from harness.ports import wait_for_port
from harness.proxy_process import ProxyProcess
from kafka_policy_proxy.codec.header import peek_request_header, request_header, response_header

PRODUCE, FETCH, METADATA = 0, 1, 3
MIB = 1 << 20


class FakeBroker:
    """Answers Metadata (one broker: itself), Fetch with the size asked for, Produce 'ok'."""

    def __init__(self, port: int, body_bytes: int) -> None:
        self.port = port
        self.body = memoryview(bytes(body_bytes))
        self.sink = bytearray(body_bytes + MIB)
        self.server = socket.create_server(("127.0.0.1", port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            conn, _ = self.server.accept()
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            while True:
                head = read_into(conn, 4)
                if head is None:
                    return
                size = struct.unpack(">i", head)[0]
                frame = read_into(conn, size, self.sink)
                if frame is None:
                    return
                header = peek_request_header(bytes(frame[:64]))
                reply = response_header(header.correlation_id, header.api_key, header.api_version)
                if header.api_key == FETCH:
                    wanted = struct.unpack(">i", frame[size - 4 : size])[0]
                    conn.sendall(struct.pack(">i", len(reply) + wanted) + reply)
                    conn.sendall(self.body[:wanted])
                    continue
                body = (
                    single_broker_metadata(header.api_version, self.port)
                    if header.api_key == METADATA
                    else b"ok"
                )
                conn.sendall(struct.pack(">i", len(reply) + len(body)) + reply + body)


def read_into(conn: socket.socket, size: int, into: bytearray | None = None) -> memoryview | None:
    """Exactly `size` bytes into `into` (or a new buffer), or None if the peer closes first."""
    buffer = memoryview(into if into is not None else bytearray(size))
    got = 0
    while got < size:
        n = conn.recv_into(buffer[got:size])
        if n == 0:
            return None
        got += n
    return buffer[:size]


def move(port: int, gib: float, body_mib: float) -> tuple[float, float]:
    """Fetch then produce `gib` GiB each through `port`, in bodies of `body_mib` MiB, four
    requests in flight; return the seconds each direction took."""
    body = int(body_mib * MIB)
    count = max(1, int(gib * 1024 / body_mib))
    sink = bytearray(body + MIB)
    with socket.create_connection(("127.0.0.1", port)) as conn:
        started = time.perf_counter()
        _exchange(conn, count, sink, lambda n: request_frame(FETCH, 12, n, struct.pack(">i", body)))
        fetched = time.perf_counter() - started
        records = bytes(body)
        produce = b"\x00" + struct.pack(">hi", 1, 30000)

        def produce_request(n: int) -> bytes:
            return request_frame(PRODUCE, 9, n, produce + records)

        started = time.perf_counter()
        _exchange(conn, count, sink, produce_request)
        produced = time.perf_counter() - started
    return fetched, produced


def _exchange(conn: socket.socket, count: int, sink: bytearray, make: Any) -> None:
    in_flight = 0
    sent = 0
    for _ in range(count):
        while in_flight < 4 and sent < count:
            conn.sendall(make(sent))
            sent += 1
            in_flight += 1
        head = read_into(conn, 4)
        assert head is not None, "the connection closed"
        size = struct.unpack(">i", head)[0]
        assert read_into(conn, size, sink) is not None
        in_flight -= 1


def request_frame(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    """A size-prefixed request frame with a v1-style header (client id `bench`)."""
    frame = request_header(api_key, version, correlation_id, "bench") + body
    return struct.pack(">i", len(frame)) + frame


class Relay:
    """A floor from bench/peers/, in front of the fake broker."""

    def __init__(self, script: str, port: int, target: int) -> None:
        path = Path(__file__).resolve().parent / "peers" / script
        self.process = subprocess.Popen(
            [sys.executable, str(path), f"{port}:{target}"], stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != "relay ready":
            raise RuntimeError(f"{script} did not start")
        wait_for_port(port)

    def stop(self) -> None:
        """Stop it."""
        self.process.terminate()
        self.process.wait(10)


def main() -> None:
    """Run the rounds; print a Markdown table and the raw JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--gib", type=float, default=1.0, help="per direction per round")
    parser.add_argument("--body-mib", type=float, default=1, help="0.0625: 64 KiB bodies")
    parser.add_argument("--port-base", type=int, default=19380)
    parser.add_argument("--baseline", type=Path, help="a checkout whose proxy (splice on) runs too")
    args = parser.parse_args()
    base = args.port_base
    FakeBroker(base, int(args.body_mib * MIB))  # serves from its own threads until exit
    work = Path(tempfile.mkdtemp(prefix="kpp-splice-bench-"))
    limits = {"max_frame_bytes": int(args.body_mib * MIB) + MIB}
    targets: dict[str, tuple[int, Any]] = {}
    gb = args.gib * 2**30 / 1e9
    results: dict[str, dict[str, list[float]]] = {}
    try:
        proxies = [
            ("proxy, copying", base + 10, False, None),
            ("proxy, splice", base + 13, True, None),
        ]
        if args.baseline is not None:
            env = {"PYTHONPATH": str(args.baseline.resolve())}
            proxies.append(("baseline, splice", base + 16, True, env))
        for name, port, splice, env in proxies:
            workdir = work / str(port)
            workdir.mkdir()
            extra = {"net": {"splice": splice}, "limits": limits}
            upstream = f"127.0.0.1:{base}"
            targets[name] = (port, ProxyProcess(workdir, upstream, port, port, extra, env=env))
        targets["uvloop relay"] = (base + 1, Relay("relay.py", base + 1, base))
        targets["splice relay"] = (base + 2, Relay("splice_relay.py", base + 2, base))
        results = {t: {"cpu_s_per_gb": [], "fetch_gb_s": [], "produce_gb_s": []} for t in targets}
        for port, _ in targets.values():  # warm-up
            move(port, min(0.1, args.gib), args.body_mib)
        names = list(targets)
        for round_ in range(args.rounds):
            shift = round_ % len(names)
            for name in names[shift:] + names[:shift]:
                port, target = targets[name]
                pid = target.process.pid
                before = cpu_seconds(pid)
                fetched, produced = move(port, args.gib, args.body_mib)
                r = results[name]
                r["cpu_s_per_gb"].append((cpu_seconds(pid) - before) / (2 * gb))
                r["fetch_gb_s"].append(gb / fetched)
                r["produce_gb_s"].append(gb / produced)
                print(
                    f"round {round_ + 1} {name}: {r['cpu_s_per_gb'][-1]:.3f} CPU-s/GB",
                    file=sys.stderr,
                )
        rss = {name: peak_rss_mb(t.process.pid) for name, (_, t) in targets.items()}
    finally:
        for _, target in targets.values():
            target.stop()
    print(
        "| path | CPU s per GB (fetch + produce), median | per round | fetch GB/s | produce GB/s "
        "| peak RSS MB |"
    )
    print("|---|---|---|---|---|---|")
    for name, r in results.items():
        cpu = r["cpu_s_per_gb"]
        print(
            f"| {name} | {statistics.median(cpu):.3f} | {', '.join(f'{c:.3f}' for c in cpu)} | "
            f"{statistics.median(r['fetch_gb_s']):.2f} | "
            f"{statistics.median(r['produce_gb_s']):.2f} | {rss[name]:.0f} |"
        )
    print(json.dumps({"args": vars(args), "raw": results}, default=str), file=sys.stderr)


if __name__ == "__main__":
    main()
