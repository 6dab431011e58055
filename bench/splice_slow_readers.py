"""Slow readers beside a large fetch, with net.splice on: are the slow ones still served?

A topic of `--mib` MiB (one partition, records of 256 KiB) is filled straight at the brokers.
Then, through a proxy with net.splice on, at once:
- one fast consumer (confluent-kafka) reads the whole topic: its Fetch responses (up to
  4 MiB) are spliced at full speed;
- `--readers` slow readers, each a raw connection to the partition leader's node listener,
  fetch the topic's first 4 MiB over and over and read the answers 4 KiB at a time at about
  `--reader-kib-s` KiB/s (their bodies wait in the proxy's pipes, the broker held back);
- a probe sends an ApiVersions request on its own connection every 50 ms: its round trip is
  the event loop's lag as a client sees it.
It reports the fast fetch's MB/s, the slow readers' bytes/s (lowest, median) and the longest
any of them waited for a byte, and the probe's round trip (p50, p99, max).

Usage: python -m bench.splice_slow_readers [--mib 1024] [--readers 50] [--reader-kib-s 64]
[--port-base 19300] (its own cluster on PORT_BASE..+69, the proxy on PORT_BASE+90..+93).
`run` measures against a cluster and proxy already up (the integration test, at a tiny size).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import socket
import statistics
import struct
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness.local_kafka import LocalKafka
from harness.messages import build
from harness.proxy_process import ProxyProcess
from kafka_policy_proxy.codec.header import request_header
from kafka_policy_proxy.codec.registry import encode, request_class

QUIET = {"log_level": 3}
RECORD_BYTES = 256 * 1024
FETCH_BYTES = 4 << 20
CHUNK = 4096
PROBE_EVERY_S = 0.05


def fill(direct: str, mib: int) -> str:
    """A fresh one-partition topic of `mib` MiB of records, written straight to the brokers."""
    topic = f"slow-readers-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": direct, **QUIET})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)
    producer = Producer(
        {"bootstrap.servers": direct, "linger.ms": 5, "batch.size": 1 << 20, **QUIET}
    )
    value = b"r" * RECORD_BYTES
    for _ in range(mib * (1 << 20) // RECORD_BYTES):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(120) == 0, "records left unsent"
    return topic


def leader_address(proxy: str, topic: str) -> tuple[str, int]:
    """The proxy's address for the partition's leader (its node listener)."""
    metadata = AdminClient({"bootstrap.servers": proxy, **QUIET}).list_topics(topic, timeout=30)
    leader = metadata.topics[topic].partitions[0].leader
    broker = metadata.brokers[leader]
    return broker.host, broker.port


def fetch_request(topic: str, correlation_id: int) -> bytes:
    """A Fetch v12 for the partition's first FETCH_BYTES."""
    cls = request_class(1, 12)
    m = importlib.import_module(cls.__module__)
    partition = build(
        m.FetchPartition,
        partition=0,
        current_leader_epoch=-1,
        fetch_offset=0,
        last_fetched_epoch=-1,
        log_start_offset=-1,
        partition_max_bytes=FETCH_BYTES,
    )
    body = encode(
        build(
            cls,
            replica_id=-1,
            max_wait=500,
            min_bytes=1,
            max_bytes=FETCH_BYTES,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=(build(m.FetchTopic, topic=topic, partitions=(partition,)),),
            forgotten_topics_data=(),
            rack_id="",
        )
    )
    return _framed(request_header(1, 12, correlation_id, "slow-reader") + body)


def _framed(frame: bytes) -> bytes:
    return struct.pack(">i", len(frame)) + frame


class SlowReader:
    """One connection that fetches and reads its answers slowly."""

    def __init__(self) -> None:
        self.bytes = 0
        self.longest_wait_s = 0.0
        self.error: str | None = None

    async def run(
        self, address: tuple[str, int], topic: str, kib_s: float, stop: asyncio.Event
    ) -> None:
        """Fetch and read slowly until told to stop."""
        try:
            reader, writer = await asyncio.open_connection(*address, limit=CHUNK)
        except OSError as exc:
            self.error = str(exc)
            return
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        request = fetch_request(topic, 1)
        try:
            while not stop.is_set():
                writer.write(request)
                left = struct.unpack(">i", await self._read(reader, 4, stop))[0]
                while left and not stop.is_set():
                    got = len(await self._read(reader, min(left, CHUNK), stop))
                    left -= got
                    await asyncio.sleep(got / (kib_s * 1024))
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            self.error = str(exc) or type(exc).__name__
        finally:
            writer.close()

    async def _read(self, reader: asyncio.StreamReader, size: int, stop: asyncio.Event) -> bytes:
        started = time.monotonic()
        data = await reader.readexactly(size)
        if not stop.is_set():
            self.longest_wait_s = max(self.longest_wait_s, time.monotonic() - started)
        self.bytes += len(data)
        return data


async def probe(address: tuple[str, int], stop: asyncio.Event) -> list[float]:
    """ApiVersions round trips, one every PROBE_EVERY_S, until told to stop."""
    reader, writer = await asyncio.open_connection(*address)
    body = encode(
        build(request_class(18, 3), client_software_name="probe", client_software_version="1")
    )
    rtts = []
    n = 0
    try:
        while not stop.is_set():
            n += 1
            sent = time.perf_counter()
            writer.write(_framed(request_header(18, 3, n, "probe") + body))
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            await reader.readexactly(size)
            rtts.append(time.perf_counter() - sent)
            await asyncio.sleep(PROBE_EVERY_S)
    finally:
        writer.close()
    return rtts


def consume_all(proxy: str, topic: str, total: int) -> float:
    """Read the whole topic through the proxy; the seconds it took."""
    consumer = Consumer(
        {
            "bootstrap.servers": proxy,
            "group.id": f"fast-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "max.partition.fetch.bytes": FETCH_BYTES,
            "fetch.max.bytes": FETCH_BYTES,
            **QUIET,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    started = time.perf_counter()
    deadline = time.monotonic() + 1800
    try:
        while got < total:
            assert time.monotonic() < deadline, f"consumed {got} of {total} bytes"
            for message in consumer.consume(100, timeout=1.0):
                assert message.error() is None, message.error()
                got += len(message.value() or b"")
        return time.perf_counter() - started
    finally:
        consumer.close()


async def measure(proxy: str, topic: str, total: int, readers: int, kib_s: float) -> dict[str, Any]:
    """The fast fetch beside the slow readers and the probe."""
    stop = asyncio.Event()
    leader = leader_address(proxy, topic)
    host, port = proxy.rsplit(":", 1)
    slow = [SlowReader() for _ in range(readers)]
    tasks = [asyncio.ensure_future(r.run(leader, topic, kib_s, stop)) for r in slow]
    await asyncio.sleep(1)  # every slow reader has a body in flight
    rtts = asyncio.ensure_future(probe((host, int(port)), stop))
    started = time.perf_counter()
    seconds = await asyncio.get_running_loop().run_in_executor(
        None, consume_all, proxy, topic, total
    )
    elapsed = time.perf_counter() - started
    stop.set()
    await asyncio.gather(*tasks)
    rounds = sorted(await rtts)
    rates = sorted(r.bytes / elapsed for r in slow)
    return {
        "fast_fetch_mb_s": total / seconds / 1e6,
        "fast_fetch_s": seconds,
        "slow_readers": readers,
        "slow_reader_errors": [r.error for r in slow if r.error],
        "slow_reader_bytes_s_min": rates[0],
        "slow_reader_bytes_s_median": statistics.median(rates),
        "slow_reader_longest_wait_s": max(r.longest_wait_s for r in slow),
        "probe_count": len(rounds),
        "probe_ms_p50": 1000 * rounds[len(rounds) // 2],
        "probe_ms_p99": 1000 * rounds[min(len(rounds) - 1, int(0.99 * len(rounds)))],
        "probe_ms_max": 1000 * rounds[-1],
    }


def run(proxy: str, direct: str, mib: int, readers: int, kib_s: float) -> dict[str, Any]:
    """Fill a topic, then measure through `proxy` (a proxy with net.splice on)."""
    topic = fill(direct, mib)
    total = mib * (1 << 20) // RECORD_BYTES * RECORD_BYTES
    return asyncio.run(measure(proxy, topic, total, readers, kib_s))


def main() -> None:
    """Bring up a cluster and a proxy with net.splice on; measure; print the report (JSON)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--readers", type=int, default=50)
    parser.add_argument("--reader-kib-s", type=float, default=64.0)
    parser.add_argument("--port-base", type=int, default=19300)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kpp-slow-readers-"))
    kafka = LocalKafka(work / "cluster", brokers=3, port_base=args.port_base, port_stride=10)
    kafka.up(timeout=420)
    proxy = None
    try:
        (work / "proxy").mkdir()
        port = args.port_base + 90
        proxy = ProxyProcess(
            work / "proxy", kafka.bootstrap_servers, port, port, {"net": {"splice": True}}
        )
        report = run(
            proxy.bootstrap, kafka.bootstrap_servers, args.mib, args.readers, args.reader_kib_s
        )
    finally:
        if proxy is not None:
            proxy.stop()
        kafka.down()
    print(json.dumps({"args": vars(args), **report}, indent=2))
    if report["slow_reader_errors"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
