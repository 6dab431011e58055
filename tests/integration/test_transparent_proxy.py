"""The transparent proxy against the real cluster, with real clients (issue: foundation)."""

from __future__ import annotations

import importlib
import random
import struct
import subprocess
import time
import uuid
from collections import defaultdict
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer

from harness.messages import build, metadata_request
from harness.proxy_process import ProxyProcess
from harness.wire import WireClient
from kafka_policy_proxy.codec.registry import request_class
from tests.integration.connection_watcher import BrokerConnectionWatcher

pytestmark = pytest.mark.integration

RECORDS = 10_000
QUIET = {"log_level": 3}


def create_topic(bootstrap: str, name: str, partitions: int = 3, replication: int = 2) -> None:
    """Create a topic through the given bootstrap address and wait for it."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    for future in admin.create_topics([NewTopic(name, partitions, replication)]).values():
        future.result(30)


def proxy_addresses(proxy: ProxyProcess) -> set[tuple[str, int]]:
    """Every address the proxy may hand out."""
    return {("127.0.0.1", proxy.node_port(n)) for n in range(1, 10)}


def test_confluent_kafka_round_trip_with_a_consumer_group(proxy: ProxyProcess, kafka: Any) -> None:
    create_topic(proxy.bootstrap, "ck-orders")
    produced: dict[int, list[tuple[int, bytes]]] = defaultdict(list)

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        produced[msg.partition()].append((msg.offset(), msg.value()))

    with BrokerConnectionWatcher(kafka.all_broker_ports) as watcher:
        producer = Producer({"bootstrap.servers": proxy.bootstrap, "linger.ms": 5, **QUIET})
        for i in range(RECORDS):
            producer.produce(
                "ck-orders", f"value-{i}".encode(), key=f"k{i % 17}".encode(), on_delivery=delivered
            )
            producer.poll(0)
        assert producer.flush(60) == 0

        consumer = Consumer(
            {
                "bootstrap.servers": proxy.bootstrap,
                "group.id": "ck-group",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                **QUIET,
            }
        )
        consumer.subscribe(["ck-orders"])
        consumed: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
        deadline = time.monotonic() + 90
        while sum(map(len, consumed.values())) < RECORDS and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=1):
                assert msg.error() is None, msg.error()
                consumed[msg.partition()].append((msg.offset(), msg.value()))
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition("ck-orders", p) for p in range(3)], 30)
        consumer.close()

    assert {p: sorted(v) for p, v in produced.items()} == dict(consumed)
    assert {tp.partition: tp.offset for tp in committed} == {
        p: max(o for o, _ in v) + 1 for p, v in produced.items()
    }
    assert not watcher.violations, f"client reached broker ports {watcher.violations}"
    assert watcher.seen_ports & {proxy.bootstrap_port, *(proxy.node_port(n) for n in (1, 2, 3))}


def test_kafka_python_round_trip_with_a_consumer_group(proxy: ProxyProcess, kafka: Any) -> None:
    create_topic(proxy.bootstrap, "kp-orders")
    with BrokerConnectionWatcher(kafka.all_broker_ports) as watcher:
        producer = KafkaProducer(bootstrap_servers=proxy.bootstrap, linger_ms=5)
        futures = [
            producer.send("kp-orders", f"value-{i}".encode(), key=f"k{i % 17}".encode())
            for i in range(RECORDS)
        ]
        producer.flush(60)
        produced: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
        for i, future in enumerate(futures):
            meta = future.get(30)
            produced[meta.partition].append((meta.offset, f"value-{i}".encode()))
        producer.close()

        consumer = KafkaConsumer(
            "kp-orders",
            bootstrap_servers=proxy.bootstrap,
            group_id="kp-group",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            consumer_timeout_ms=15_000,
        )
        consumed: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
        for record in consumer:
            consumed[record.partition].append((record.offset, record.value))
            if sum(map(len, consumed.values())) == RECORDS:
                break
        consumer.commit()
        committed = {
            p: consumer.committed(tp)
            for p, tp in ((tp.partition, tp) for tp in consumer.assignment())
        }
        consumer.close()

    assert {p: sorted(v) for p, v in produced.items()} == dict(consumed)
    assert committed == {p: max(o for o, _ in v) + 1 for p, v in produced.items()}
    assert not watcher.violations, f"client reached broker ports {watcher.violations}"


def _tool(
    kafka: Any,
    name: str,
    *args: str,
    stdin: str | None = None,
    watcher: BrokerConnectionWatcher,
    timeout: float = 90,
) -> str:
    process = subprocess.Popen(
        kafka.tool_command(name, *args),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    watcher.watch(process.pid)
    out, err = process.communicate(stdin, timeout=timeout)
    assert process.returncode == 0, f"{name} failed: {err}"
    return out


def test_kafka_cli_tools_work_through_the_proxy(proxy: ProxyProcess, kafka: Any) -> None:
    bootstrap = ("--bootstrap-server", proxy.bootstrap)
    with BrokerConnectionWatcher(kafka.all_broker_ports) as watcher:
        _tool(
            kafka,
            "kafka-topics",
            *bootstrap,
            "--create",
            "--topic",
            "cli-events",
            "--partitions",
            "2",
            "--replication-factor",
            "2",
            watcher=watcher,
        )
        listed = _tool(kafka, "kafka-topics", *bootstrap, "--list", watcher=watcher)
        described = _tool(
            kafka,
            "kafka-topics",
            *bootstrap,
            "--describe",
            "--topic",
            "cli-events",
            watcher=watcher,
        )
        lines = [f"line-{i}" for i in range(50)]
        _tool(
            kafka,
            "kafka-console-producer",
            *bootstrap,
            "--topic",
            "cli-events",
            stdin="\n".join(lines) + "\n",
            watcher=watcher,
        )
        consumed = _tool(
            kafka,
            "kafka-console-consumer",
            *bootstrap,
            "--topic",
            "cli-events",
            "--from-beginning",
            "--max-messages",
            "50",
            "--timeout-ms",
            "60000",
            "--group",
            "cli-group",
            watcher=watcher,
        )
    assert "cli-events" in listed.split()
    assert "PartitionCount: 2" in described and "ReplicationFactor: 2" in described
    assert sorted(consumed.split()) == sorted(lines)
    assert not watcher.violations, f"a CLI tool reached broker ports {watcher.violations}"


def _addresses(response: Any) -> list[tuple[str, int]]:
    for field in ("brokers", "coordinators", "node_endpoints"):
        if hasattr(response, field):
            return [(e.host, int(e.port)) for e in getattr(response, field) if int(e.port) >= 0]
    return [(response.host, int(response.port))] if int(response.port) >= 0 else []


@pytest.mark.parametrize(
    ("api_key", "versions"),
    [(3, range(4, 14)), (10, range(0, 7)), (60, range(0, 3))],
    ids=["Metadata", "FindCoordinator", "DescribeCluster"],
)
def test_responses_carry_only_proxy_addresses(
    proxy: ProxyProcess, kafka: Any, api_key: int, versions: range
) -> None:
    broker_addresses = set(kafka.broker_addresses.values())
    allowed = proxy_addresses(proxy)
    client = WireClient("127.0.0.1", proxy.bootstrap_port)
    for version in versions:
        message = build(
            request_class(api_key, version),
            topics=None,
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
            key="addr-group",
            key_type=0,
            coordinator_keys=("addr-group",),
            endpoint_type=1,
            include_fenced_brokers=False,
        )
        deadline = time.monotonic() + 30
        while True:
            response = client.request(message)
            addresses = _addresses(response)
            if addresses or time.monotonic() > deadline:
                break
            time.sleep(0.5)  # the coordinator may not be available yet
        assert addresses, f"no addresses in v{version}: {response}"
        assert set(addresses) <= allowed, f"v{version} leaked {set(addresses) - allowed}"
        assert not set(addresses) & broker_addresses
    client.close()


def test_pipelined_requests_come_back_in_order(proxy: ProxyProcess) -> None:
    client = WireClient("127.0.0.1", proxy.bootstrap_port)
    metadata = metadata_request()
    cluster = build(
        request_class(60, 1), include_cluster_authorized_operations=False, endpoint_type=1
    )
    expected = []
    for i in range(60):
        if i % 3 == 2:
            # An ApiVersions version the proxy answers itself, between broker-bound requests.
            cid = 10_000 + i
            body = struct.pack(">hhih", 18, 99, cid, 1) + b"w\x00\x00"
            client.send_raw(struct.pack(">i", len(body)) + body)
            client.sent.append((cid, 18, 99))
            expected.append(cid)
        else:
            expected.append(client.send(metadata if i % 2 else cluster, 10_000 + i))
    received = [client.receive()[0] for _ in expected]
    assert received == expected
    client.close()


@pytest.mark.parametrize("acks", ["all", "0"])
def test_large_records_stream_through_byte_exact(
    proxy: ProxyProcess, kafka: Any, acks: str
) -> None:
    # Requests this large reach the broker as they arrive, not buffered whole: what the
    # broker stored is read back directly from it, never through the proxy.
    topic = f"large-{acks}-{uuid.uuid4().hex[:6]}"
    create_topic(proxy.bootstrap, topic, partitions=2, replication=1)
    rng = random.Random(acks)
    values = [rng.randbytes(rng.choice((10, 5_000, 300_000, 900_000))) for _ in range(60)]
    producer = Producer(
        {"bootstrap.servers": proxy.bootstrap, "acks": acks, "linger.ms": 20, **QUIET}
    )
    for i, value in enumerate(values):
        producer.produce(topic, value, key=str(i).encode())
        producer.poll(0)
    assert producer.flush(60) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": kafka.bootstrap_servers,
            "group.id": f"{topic}-direct",
            "auto.offset.reset": "earliest",
            **QUIET,
        }
    )
    consumer.subscribe([topic])
    stored: dict[int, bytes] = {}
    deadline = time.monotonic() + 60
    while len(stored) < len(values) and time.monotonic() < deadline:
        for msg in consumer.consume(100, timeout=1):
            assert msg.error() is None, msg.error()
            stored[int(msg.key())] = msg.value()
    consumer.close()
    assert stored == dict(enumerate(values))


def test_acks_zero_produce_neither_stalls_nor_loses(proxy: ProxyProcess) -> None:
    create_topic(proxy.bootstrap, "acks0", partitions=1, replication=1)
    producer = Producer({"bootstrap.servers": proxy.bootstrap, "acks": 0, **QUIET})
    for i in range(5_000):
        producer.produce("acks0", f"{i}".encode())
    assert producer.flush(30) == 0
    # The same producer still gets answers (metadata) after thousands of unanswered requests.
    assert "acks0" in producer.list_topics(timeout=10).topics
    consumer = Consumer(
        {
            "bootstrap.servers": proxy.bootstrap,
            "group.id": "acks0-g",
            "auto.offset.reset": "earliest",
            **QUIET,
        }
    )
    consumer.subscribe(["acks0"])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(values) < 5_000 and time.monotonic() < deadline:
        values += [m.value() for m in consumer.consume(1000, timeout=1) if m.error() is None]
    consumer.close()
    assert values == [f"{i}".encode() for i in range(5_000)]


@pytest.mark.parametrize(
    ("garbage", "reason"),
    [
        (struct.pack(">i", 200 * 1024 * 1024) + b"x" * 100, "bad frame size"),
        (struct.pack(">i", -7) + b"x" * 10, "bad frame size"),
        (struct.pack(">i", 12) + b"\x7f\x7f\x00\x00" + b"\x00" * 8, "unsupported API"),
        (struct.pack(">i", 3) + b"\x00\x01\x02", "malformed request header"),
    ],
    ids=["oversize", "negative", "unknown-api", "short-header"],
)
def test_malformed_frames_close_only_that_connection(
    proxy: ProxyProcess, garbage: bytes, reason: str
) -> None:
    bystander = WireClient("127.0.0.1", proxy.bootstrap_port)
    bad = WireClient("127.0.0.1", proxy.bootstrap_port)
    local_port = bad.sock.getsockname()[1]
    bad.send_raw(garbage)
    assert bad.is_closed(10)
    assert proxy.alive()
    cluster = build(
        request_class(60, 1), include_cluster_authorized_operations=False, endpoint_type=1
    )
    assert bystander.request(cluster).error_code.value == 0
    log_line = next(
        line
        for line in proxy.log_text().splitlines()
        if f"127.0.0.1:{local_port}" in line and "closing client" in line
    )
    assert reason in log_line
    bystander.close()


def test_truncated_frame_and_random_bytes(proxy: ProxyProcess) -> None:
    rng = random.Random(20261122)
    truncated = WireClient("127.0.0.1", proxy.bootstrap_port)
    port = truncated.sock.getsockname()[1]
    truncated.send_raw(struct.pack(">i", 100) + b"\x00\x03\x00\x0c")
    truncated.close()
    for _ in range(30):
        body = rng.randbytes(rng.randrange(1, 200))
        client = WireClient("127.0.0.1", proxy.bootstrap_port)
        client.send_raw(struct.pack(">i", len(body)) + body)
        assert client.is_closed(10)
        client.close()
    for _ in range(10):
        client = WireClient("127.0.0.1", proxy.bootstrap_port)
        client.send_raw(rng.randbytes(64))
        client.close()
    assert proxy.alive()
    time.sleep(0.5)
    assert any(
        f"127.0.0.1:{port}" in line and "truncated frame" in line
        for line in proxy.log_text().splitlines()
    )
    check = WireClient("127.0.0.1", proxy.bootstrap_port)
    assert (
        check.request(
            build(request_class(18, 3), client_software_name="t", client_software_version="1")
        ).error_code.value
        == 0
    )
    check.close()


def _fetch_request(topic: str) -> Any:
    m_request = request_class(1, 12)
    m = importlib.import_module(m_request.__module__)
    partition = build(
        m.FetchPartition,
        partition=0,
        current_leader_epoch=-1,
        fetch_offset=0,
        last_fetched_epoch=-1,
        log_start_offset=-1,
        partition_max_bytes=1 << 20,
    )
    return build(
        m_request,
        replica_id=-1,
        max_wait=3000,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(build(m.FetchTopic, topic=topic, partitions=(partition,)),),
        forgotten_topics_data=(),
        rack_id="",
    )


def test_sigterm_lets_a_long_poll_finish_then_exits(kafka: Any, tmp_path: Any) -> None:
    second = ProxyProcess(tmp_path, kafka.bootstrap_servers, 29600, 29700)
    try:
        create_topic(second.bootstrap, f"drain-{uuid.uuid4().hex[:6]}", partitions=1, replication=1)
        topic = next(
            t
            for t in AdminClient({"bootstrap.servers": second.bootstrap, **QUIET})
            .list_topics(timeout=10)
            .topics
            if t.startswith("drain-")
        )
        leader = (
            AdminClient({"bootstrap.servers": second.bootstrap, **QUIET})
            .list_topics(topic, timeout=10)
            .topics[topic]
            .partitions[0]
            .leader
        )
        client = WireClient("127.0.0.1", second.node_port(leader))
        started = time.monotonic()
        client.send(_fetch_request(topic))
        time.sleep(0.5)
        second.process.terminate()
        _cid, response = client.receive()  # the empty long-poll still completes
        assert time.monotonic() - started >= 2.5
        assert response.error_code.value == 0
        assert client.is_closed(10)
        assert second.process.wait(20) == 0
    finally:
        second.stop()


def test_new_broker_gets_a_listener_and_losing_it_closes_clients(
    proxy: ProxyProcess, kafka: Any
) -> None:
    node = kafka.add_broker()
    client = WireClient("127.0.0.1", proxy.bootstrap_port)
    metadata = metadata_request()
    response = client.request(metadata)
    brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
    assert brokers[node] == ("127.0.0.1", proxy.node_port(node))
    # The listener was bound before the client was told about it.
    on_new_node = WireClient("127.0.0.1", proxy.node_port(node))
    version = build(request_class(18, 3), client_software_name="t", client_software_version="1")
    assert on_new_node.request(version).error_code.value == 0
    kafka.stop_broker(node)
    assert on_new_node.is_closed(30)
    assert proxy.alive()
    client.close()
