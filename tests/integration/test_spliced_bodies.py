"""Spliced pass-through bodies (net.splice) against the real cluster: large Produce requests and
Fetch responses move socket to socket, and what the brokers stored is read back directly."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from bench import splice_slow_readers
from harness.proxy_process import ProxyProcess
from tests.integration.test_metrics import scrape, total
from tests.integration.test_transparent_proxy import QUIET, create_topic

pytestmark = pytest.mark.integration

BOOTSTRAP_PORT, ADMIN_PORT = 19350, 19360  # nodes on 19351..19353


@pytest.fixture(scope="module")
def splice_proxy(kafka: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    process = ProxyProcess(
        tmp_path_factory.mktemp("splice"),
        kafka.bootstrap_servers,
        BOOTSTRAP_PORT,
        BOOTSTRAP_PORT,
        {"net": {"splice": True}, "admin": {"port": ADMIN_PORT}},
    )
    try:
        yield process
    finally:
        assert process.stop() == 0, "the proxy did not drain and exit cleanly on SIGTERM"


def read_all(bootstrap: str, topic: str, count: int, group: str) -> dict[int, bytes]:
    """The records of `topic` by key, consumed through `bootstrap`."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "fetch.max.bytes": 8 << 20,
            **QUIET,
        }
    )
    consumer.subscribe([topic])
    stored: dict[int, bytes] = {}
    deadline = time.monotonic() + 90
    while len(stored) < count and time.monotonic() < deadline:
        for msg in consumer.consume(100, timeout=1):
            assert msg.error() is None, msg.error()
            stored[int(msg.key())] = msg.value()
    consumer.close()
    return stored


@pytest.mark.parametrize("acks", ["all", "0"])
def test_spliced_bodies_are_byte_exact_at_the_brokers_and_back(
    splice_proxy: ProxyProcess, kafka: Any, acks: str
) -> None:
    topic = f"spliced-{acks}-{uuid.uuid4().hex[:6]}"
    create_topic(splice_proxy.bootstrap, topic, partitions=2, replication=2)
    before = scrape(ADMIN_PORT)
    rng = random.Random(acks)
    values = [rng.randbytes(rng.choice((10, 5_000, 300_000, 900_000))) for _ in range(80)]
    producer = Producer(
        {
            "bootstrap.servers": splice_proxy.bootstrap,
            "acks": acks,
            "linger.ms": 50,
            "batch.size": 4 << 20,
            "compression.type": "none",
            **QUIET,
        }
    )
    for i, value in enumerate(values):
        producer.produce(topic, value, key=str(i).encode())
        producer.poll(0)
    assert producer.flush(60) == 0
    expected = dict(enumerate(values))
    # What the brokers stored, read directly from them.
    assert read_all(kafka.bootstrap_servers, topic, len(values), f"{topic}-direct") == expected
    # And back through the proxy, whose Fetch responses are spliced.
    assert read_all(splice_proxy.bootstrap, topic, len(values), f"{topic}-proxied") == expected
    after = scrape(ADMIN_PORT)
    moved = {
        direction: total(after, "kpp_spliced_bytes_total", direction=direction)
        - total(before, "kpp_spliced_bytes_total", direction=direction)
        for direction in ("client_to_broker", "broker_to_client")
    }
    size = sum(map(len, values))
    # Most of the bytes went by splice, both ways (headers and small frames by copy).
    assert moved["client_to_broker"] > size / 2, moved
    assert moved["broker_to_client"] > size / 2, moved


def test_slow_readers_are_served_beside_a_large_fetch(
    splice_proxy: ProxyProcess, kafka: Any
) -> None:
    # bench.splice_slow_readers at a tiny size (its figures are in docs/benchmarks.md): every
    # slow reader keeps receiving while a fast consumer reads the whole topic by splice.
    report = splice_slow_readers.run(
        splice_proxy.bootstrap, kafka.bootstrap_servers, mib=16, readers=5, kib_s=256
    )
    assert report["slow_reader_errors"] == []
    assert report["slow_reader_bytes_s_min"] > 0
    assert report["probe_count"] > 0
