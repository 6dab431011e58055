"""CPU per Metadata response through the proxy's rewrite path, against reading it from a socket.

Usage: python -m bench.growth_metadata [--topics 1000,10000,100000] [--partitions 3]
                                       [--runs 7] [--chart docs/growth-metadata.png]
For each size, a Metadata v12 response of that many topics (3 brokers on internal addresses,
`--partitions` partitions each) is built with kio. Two costs are timed, alternating, in CPU
time of the timing thread, and their medians printed:
- `read`: receiving the response's bytes from a loopback TCP socket in 256 KiB reads, as
  uvloop reads them (a thread writes them; only the reader's CPU counts);
- `proxy`: the same bytes, in the same 256 KiB pieces, fed to the code the proxy runs on a
  broker's answer: a connection's Conversation (framing, response order) with the address
  rewrite filter (proxy/filters/address_rewrite.py), up to the frame it hands the client.
The target (issue 35): `proxy` linear in the response size and at most 2x `read`.
"""

from __future__ import annotations

import argparse
import gc
import socket
import statistics
import struct
import threading
import time
from pathlib import Path
from typing import Any

from bench.growth_chart import draw
from harness.messages import build, metadata_response
from kafka_policy_proxy.codec.header import request_header
from kafka_policy_proxy.codec.registry import encode, request_class
from kafka_policy_proxy.proxy.filters.address_rewrite import AddressRewriteFilter
from kafka_policy_proxy.proxy.filters.chain import FilterChain
from kafka_policy_proxy.proxy.net.actions import SendToClient
from kafka_policy_proxy.proxy.net.conversation import Conversation

VERSION = 12
READ_SIZE = 256 * 1024  # uvloop's read buffer


class Listeners:
    """Every broker already has its proxy listener (the steady state)."""

    def endpoint(self, node_id: int) -> tuple[str, int]:
        """The proxy's address for a node."""
        return "proxy.local", 9200 + node_id

    def sni_endpoint(self, node_id: int) -> tuple[str, int]:
        """Not used: the bench's listener is not the SNI one."""
        return self.endpoint(node_id)

    def ready(self, nodes: dict[int, tuple[str, int]]) -> bool:
        """Always: no listener is to be bound."""
        return True

    async def ensure(self, nodes: dict[int, tuple[str, int]]) -> None:
        """Never called when ready."""


def request_frame(correlation_id: int) -> bytes:
    """A client's Metadata v12 request for every topic."""
    cls = request_class(3, VERSION)
    body = request_header(3, VERSION, correlation_id, "bench") + encode(
        build(
            cls,
            topics=None,
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    return struct.pack(">i", len(body)) + body


def response_frame(topics: int, partitions: int) -> bytes:
    """The broker's answer, framed: size, response header v1 (correlation id 0), body."""
    body = encode(metadata_response(VERSION, topics=topics, partitions=partitions))
    inner = struct.pack(">i", 0) + b"\x00" + body
    return struct.pack(">i", len(inner)) + inner


def pieces(frame: bytes, correlation_id: int) -> list[bytes]:
    """The frame with this correlation id, cut as socket reads would deliver it."""
    data = frame[:4] + struct.pack(">i", correlation_id) + frame[8:]
    return [data[i : i + READ_SIZE] for i in range(0, len(data), READ_SIZE)]


def proxy_cpu(frame: bytes, correlation_id: int) -> tuple[float, int]:
    """CPU seconds for one conversation to turn the broker's frame into the client's, and
    the size of what it hands the client."""
    conversation = Conversation(
        FilterChain([AddressRewriteFilter(Listeners())]),
        connection_id=1,
        listener="bench",
        client_address="127.0.0.1:1",
        principal="User:ANONYMOUS",
        max_frame_bytes=100 * 1024 * 1024,
    )
    conversation.broker_connected()
    conversation.client_data(request_frame(correlation_id))
    reads = pieces(frame, correlation_id)
    start = time.thread_time()
    out = [a for data in reads for a in conversation.broker_data(data)]
    elapsed = time.thread_time() - start
    sent = [a for a in out if isinstance(a, SendToClient)]
    assert len(sent) == 1 and not conversation.closed, out
    return elapsed, sum(len(d) for d in sent[0].data)


def read_cpu(frame: bytes) -> float:
    """CPU seconds of the reading thread to receive the frame over loopback TCP."""
    listener = socket.create_server(("127.0.0.1", 0))
    writer = socket.create_connection(listener.getsockname())
    reader, _ = listener.accept()
    listener.close()
    sender = threading.Thread(target=writer.sendall, args=(frame,))
    sender.start()
    total, start = 0, time.thread_time()
    while total < len(frame):
        total += len(reader.recv(READ_SIZE))
    elapsed = time.thread_time() - start
    sender.join()
    writer.close()
    reader.close()
    return elapsed


def measure(sizes: list[int], partitions: int, runs: int) -> list[dict[str, Any]]:
    """Per size: the response's bytes and the median `read` and `proxy` CPU in ms."""
    rows = []
    for topics in sizes:
        frame = response_frame(topics, partitions)
        times: dict[str, list[float]] = {"read": [], "proxy": []}
        out_size = 0
        for run in range(runs):
            gc.collect()
            times["read"].append(read_cpu(frame))
            gc.collect()
            elapsed, out_size = proxy_cpu(frame, run + 1)
            times["proxy"].append(elapsed)
        read, proxy = (statistics.median(times[k]) * 1e3 for k in ("read", "proxy"))
        rows.append(
            {
                "topics": topics,
                "bytes": len(frame),
                "out_bytes": out_size,
                "read_ms": read,
                "proxy_ms": proxy,
                "ratio": proxy / read,
                "proxy_ns_per_byte": proxy * 1e6 / len(frame),
            }
        )
    return rows


def main() -> None:
    """Print the table and draw the chart."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--topics", default="1000,10000,100000")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--chart", type=Path, default=Path("docs/growth-metadata.png"))
    args = parser.parse_args()
    rows = measure([int(t) for t in args.topics.split(",")], args.partitions, args.runs)
    print(f"Metadata v{VERSION}, 3 brokers, {args.partitions} partitions per topic, ms CPU")
    print("| topics | response bytes | read ms | proxy ms | proxy / read | proxy ns per byte |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['topics']:,} | {r['bytes']:,} | {r['read_ms']:.3f} | {r['proxy_ms']:.3f} "
            f"| {r['ratio']:.2f} | {r['proxy_ns_per_byte']:.2f} |"
        )
    draw(
        args.chart,
        "CPU per Metadata response",
        "response bytes",
        "CPU ms per response (median)",
        {
            "proxy (conversation + address rewrite)": [(r["bytes"], r["proxy_ms"]) for r in rows],
            "read from a socket": [(r["bytes"], r["read_ms"]) for r in rows],
        },
        guide="proxy (conversation + address rewrite)",
    )
    print(f"chart: {args.chart}")


if __name__ == "__main__":
    main()
