"""The soak's traffic: verifiable producers and consumers, and idle, slow and new connections
(the checked admin requests are soak_admin.py)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import subprocess
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer

from bench import soak_wire as wire
from bench.soak_wire import AsyncWire, Misordered


class Phase:
    """The fault phase now in progress, for latencies and for what an answer may be."""

    def __init__(self) -> None:
        self.name = "warmup"
        # Until when an allowed request may be denied for want of cluster state (the hang).
        self.state_unreadable_until = 0.0

    def set(self, name: str) -> None:
        """Enter a phase."""
        self.name = name


@dataclass
class Tally:
    """Counts that must end at zero, and what happened on the way."""

    misordered_responses: int = 0
    wrong_decisions: list[str] = field(default_factory=list)
    fail_closed_denials: int = 0
    admin_rounds: int = 0
    broker_errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    reconnects: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    new_connections: int = 0
    new_connection_failures: int = 0


class VerifiedProducer(threading.Thread):
    """An idempotent, acks=all confluent-kafka producer; values are `<tag>.<sequence>`."""

    def __init__(self, bootstrap: str, topic: str, tag: int, rate: float, phase: Phase) -> None:
        super().__init__(name=f"producer-{tag}", daemon=True)
        self.topic, self.tag, self.rate, self.phase = topic, tag, rate, phase
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 300_000,
                "client.id": f"soak-producer-{tag}",
                "log_level": 3,  # disconnects during the faults are expected, not news
            }
        )
        self.sent = 0
        self.acked: set[int] = set()
        self.failed: dict[str, int] = defaultdict(int)
        self.latencies: dict[str, list[float]] = defaultdict(list)
        self.stopping = threading.Event()

    def run(self) -> None:
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        while not self.stopping.is_set():
            seq = self.sent
            started, phase = time.monotonic(), self.phase.name

            def done(
                err: Any, _msg: Any, seq: int = seq, started: float = started, phase: str = phase
            ) -> None:
                if err is None:
                    self.acked.add(seq)
                    self.latencies[phase].append(time.monotonic() - started)
                else:
                    self.failed[str(err.name())] += 1

            try:
                self.producer.produce(self.topic, f"{self.tag}.{seq}".encode(), on_delivery=done)
                self.sent += 1
            except BufferError:
                self.producer.poll(0.1)
                continue
            self.producer.poll(0)
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                next_at = time.monotonic()
        self.producer.flush(120)

    def stop(self) -> None:
        """Stop sending; the thread ends once everything sent is delivered or failed."""
        self.stopping.set()


class JavaVerifiableProducer:
    """Kafka's own VerifiableProducer (idempotent, acks=all): values `<tag>.<n>`, acks read
    from its JSON output."""

    def __init__(self, command: list[str], tag: int) -> None:
        self.tag = tag
        self.acked: set[int] = set()
        self.failed = 0
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("name") == "producer_send_success":
                self.acked.add(int(str(event["value"]).split(".", 1)[1]))
            elif event.get("name") == "producer_send_error":
                self.failed += 1

    def stop(self) -> None:
        """SIGTERM: it flushes what it sent and reports the acks, then exits."""
        self.process.terminate()
        try:
            self.process.wait(120)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.reader.join(30)


class VerifyingConsumer(threading.Thread):
    """A consumer in the verifying group; every record it sees is kept by (partition, offset)."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        name: str,
        seen: dict[tuple[int, int], str],
        lock: threading.Lock,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.seen, self.lock = seen, lock
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "soak-verify",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": True,
                "client.id": name,
                "session.timeout.ms": 30_000,
                "log_level": 3,
            }
        )
        self.consumer.subscribe([topic])
        self.stopping = threading.Event()
        self.errors: dict[str, int] = defaultdict(int)

    def run(self) -> None:
        while not self.stopping.is_set():
            for message in self.consumer.consume(500, 0.5):
                error = message.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        self.errors[error.name()] += 1
                    continue
                with self.lock:
                    self.seen[message.partition(), message.offset()] = message.value().decode()
        self.consumer.close()


@dataclass
class Verdict:
    """What the records say: lost, duplicated and misordered, by the log's own offsets."""

    acked: int
    consumed: int
    lost: int
    duplicated: int
    misordered: int
    lost_sample: list[str]


def verify(acked: dict[int, set[int]], seen: dict[tuple[int, int], str]) -> Verdict:
    """Compare what was acknowledged with what the log holds (one entry per offset)."""
    places: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    order: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for (partition, offset), value in seen.items():
        tag, _, seq = value.partition(".")
        key = (int(tag), int(seq))
        places[key].append((partition, offset))
        order[int(tag), partition].append((offset, int(seq)))
    lost = [
        f"{tag}.{seq}" for tag, seqs in acked.items() for seq in seqs if (tag, seq) not in places
    ]
    duplicated = sum(1 for where in places.values() if len(where) > 1)
    misordered = 0
    for records in order.values():
        records.sort()
        misordered += sum(1 for a, b in itertools.pairwise(records) if b[1] <= a[1])
    return Verdict(
        acked=sum(len(s) for s in acked.values()),
        consumed=len(seen),
        lost=len(lost),
        duplicated=duplicated,
        misordered=misordered,
        lost_sample=sorted(lost)[:20],
    )


async def idle_connections(
    host: str, port: int, count: int, tally: Tally, stop: asyncio.Event
) -> None:
    """`count` connections that say ApiVersions, then only a Metadata now and then."""

    async def one(index: int) -> None:
        await asyncio.sleep(index * 0.01)
        while not stop.is_set():
            try:
                conn = await AsyncWire.open(host, port)
                try:
                    await conn.send(wire.api_versions())
                    await asyncio.wait_for(conn.receive(), 30)
                    while not stop.is_set():
                        await pause(stop, 30 + random.random() * 30)
                        await conn.send(wire.metadata(("soak.records",)))
                        await asyncio.wait_for(conn.receive(), 30)
                finally:
                    conn.close()
            except Misordered:
                tally.misordered_responses += 1
            except (OSError, asyncio.IncompleteReadError, TimeoutError):
                tally.reconnects["idle"] += 1
                await pause(stop, 1)

    await asyncio.gather(*(one(i) for i in range(count)))


async def slow_readers(host: str, port: int, count: int, tally: Tally, stop: asyncio.Event) -> None:
    """Connections that pipeline Metadata requests and read the answers 256 bytes at a time."""

    async def one() -> None:
        while not stop.is_set():
            try:
                conn = await AsyncWire.open(host, port)
                try:
                    while not stop.is_set():
                        for _ in range(4):
                            await conn.send(wire.metadata(None))
                        while conn.outstanding:
                            await asyncio.wait_for(conn.receive(chunk=256, pause=0.05), 60)
                        await pause(stop, 1)
                finally:
                    conn.close()
            except Misordered:
                tally.misordered_responses += 1
            except (OSError, asyncio.IncompleteReadError, TimeoutError):
                tally.reconnects["slow"] += 1
                await pause(stop, 1)

    await asyncio.gather(*(one() for _ in range(count)))


async def connection_churn(
    host: str, port: int, rate: float, tally: Tally, stop: asyncio.Event
) -> None:
    """New connections at `rate` per second: connect, ApiVersions, close."""

    async def one() -> None:
        try:
            conn = await AsyncWire.open(host, port, within=5)
            try:
                await conn.send(wire.api_versions())
                await asyncio.wait_for(conn.receive(), 10)
                tally.new_connections += 1
            finally:
                conn.close()
        except Misordered:
            tally.misordered_responses += 1
        except (OSError, asyncio.IncompleteReadError, TimeoutError):
            tally.new_connection_failures += 1

    tasks: set[asyncio.Task[None]] = set()
    while not stop.is_set():
        task = asyncio.ensure_future(one())
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        await pause(stop, 1.0 / rate)
    await asyncio.gather(*tasks, return_exceptions=True)


async def pause(stop: asyncio.Event, seconds: float) -> None:
    """Sleep `seconds`, or less if `stop` is set meanwhile."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
