"""Size before cost, answer size and missing topics, through the real proxy and cluster.

Small frames of many tiny entries used to cost far more than their size: a 1 MiB DeleteTopics
v5 of 1,048,576 empty names took 81 s and 1.4 GiB, a 100,000-topic CreateTopics 48 s and
110 MiB, while other clients stalled; a DeleteTopics v6 of 2,000 ids got a 160 MB answer. And
a change to a missing topic was answered POLICY_VIOLATION where a broker answers
UNKNOWN_TOPIC_OR_PARTITION. The proxy's RSS is read from /proc, the topics on the brokers.
"""

from __future__ import annotations

import shutil
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from harness.proxy_process import ProxyProcess
from harness.wire import WireClient
from kafka_policy_proxy.codec.framing import framed
from kafka_policy_proxy.codec.header import request_header
from kafka_policy_proxy.codec.registry import decode_exact, encode, response_class
from tests.integration.cluster_fixtures import TEST_POLICY
from tests.security.raw import create_topics_request, delete_by_id_request

pytestmark = pytest.mark.integration

MIB = 1 << 20
BOOTSTRAP_PORT = 18100
NODE_PORT_BASE = 18110  # node N on 18110 + N
MAX_ENTRIES = 5000  # the default of limits.max_entries_per_request
INVALID_REQUEST, UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID = 42, 3, 100
ATTACKERS = 8
# Each attack frame is closed within this, from its last byte (it was 81 s for the first).
CLOSED_WITHIN_S = 5.0
# The proxy's RSS may grow by the attack frames it holds at once (each read whole, then one
# copy) and a fixed allowance for the allocator; it grew by 1.4 GiB for one such frame.
RSS_ALLOWANCE = ATTACKERS * 2 * 2 * MIB + 32 * MIB
# A canary create through the proxy while the attacks run must finish within this.
CANARY_WITHIN_S = 10.0
# Per id of a DeleteTopics v6 answer: the id, a null name, the code, a short message.
ANSWER_BYTES_PER_ID = 400


@pytest.fixture(scope="module")
def bounded(kafka: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    """A proxy enforcing the test policy, every limit at its default."""
    workdir = tmp_path_factory.mktemp("bounded")
    policy = workdir / "policy.yaml"
    shutil.copy(TEST_POLICY, policy)
    audit = workdir / "audit.jsonl"
    process = ProxyProcess(
        workdir,
        kafka.bootstrap_servers,
        BOOTSTRAP_PORT,
        NODE_PORT_BASE,
        extra={"policy": {"file": str(policy), "watch": False}, "audit": {"file": str(audit)}},
    )
    process.audit_path = audit
    try:
        yield process
    finally:
        assert process.stop() == 0


@pytest.fixture(scope="module")
def direct(kafka: Any) -> Iterator[AdminClient]:
    """An admin client on the brokers themselves; the topics made here are deleted after."""
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers, "log_level": 3})
    yield admin
    made = [t for t in admin.list_topics(timeout=30).topics if t.startswith("bounds.")]
    for future in admin.delete_topics(made).values() if made else ():
        future.result(60)


@pytest.fixture(scope="module")
def through(bounded: ProxyProcess) -> AdminClient:
    """An admin client on the proxy."""
    return AdminClient({"bootstrap.servers": bounded.bootstrap, "log_level": 3})


def rss(pid: int) -> int:
    """The process's resident set size, in bytes."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def million_empty_names() -> bytes:
    """DeleteTopics v5 naming 1,048,576 empty topics: the issue's 1 MiB frame."""
    count = 1 << 20
    body = _uvarint(count + 1) + b"\x01" * count + struct.pack(">i", 30_000) + b"\x00"
    return framed(request_header(20, 5, 1, "attacker"), body)


def hundred_thousand_creates() -> bytes:
    """CreateTopics v7 of 100,000 valid-looking topics (2.5 MB)."""
    message = create_topics_request(*(f"bounds.flood-{i:06d}" for i in range(100_000)))
    return framed(request_header(19, 7, 1, "attacker"), encode(message))


def closes_at_once(frame: bytes) -> float:
    """Send the frame on a fresh connection; seconds from its last byte until the close."""
    sock = socket.create_connection(("127.0.0.1", BOOTSTRAP_PORT), timeout=30)
    try:
        try:
            sock.sendall(frame)
        except OSError:
            return 0.0  # closed before the frame was all sent
        sent = time.monotonic()
        sock.settimeout(CLOSED_WITHIN_S * 4)
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            data = b""
        assert data == b"", "the proxy answered instead of closing"
        return time.monotonic() - sent
    finally:
        sock.close()


def canary(through: AdminClient, names: list[str]) -> float:
    """Create one topic through the proxy; how long it took."""
    name = f"bounds.canary-{uuid.uuid4().hex[:8]}"
    names.append(name)
    began = time.monotonic()
    for future in through.create_topics([NewTopic(name, 1, 1)]).values():
        future.result(CANARY_WITHIN_S * 3)
    return time.monotonic() - began


def on_broker(direct: AdminClient) -> set[str]:
    """The topics the brokers have, after a fence: changes before it are applied."""
    fence = f"bounds.fence-{uuid.uuid4().hex[:8]}"
    for future in direct.create_topics([NewTopic(fence, 1, 1)]).values():
        future.result(30)
    deadline = time.monotonic() + 30
    while fence not in (topics := set(direct.list_topics(timeout=30).topics)):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    return topics


def attacked(
    bounded: ProxyProcess, through: AdminClient, frame: Callable[[], bytes]
) -> tuple[list[float], list[float], int, list[str]]:
    """ATTACKERS connections send the frame while canaries create; close times, canary times,
    the RSS peak over the idle proxy's, and the canaries' names."""
    data = frame()
    pid = bounded.process.pid
    names: list[str] = []
    canary(through, names)  # warm: every path the canary takes is loaded
    idle = rss(pid)
    peak = idle
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.02):
            peak = max(peak, rss(pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    with ThreadPoolExecutor(ATTACKERS) as pool:
        closes = [pool.submit(closes_at_once, data) for _ in range(ATTACKERS * 3)]
        canaries = [canary(through, names) for _ in range(3)]
        times = [c.result() for c in closes]
    done.set()
    sampler.join()
    return times, canaries, peak - idle, names


@pytest.mark.parametrize(
    ("frame", "found"),
    [(million_empty_names, "1048576 entries"), (hundred_thousand_creates, "100000 entries")],
    ids=["million-empty-names", "hundred-thousand-creates"],
)
def test_an_oversized_request_is_closed_at_once_and_costs_no_memory(
    bounded: ProxyProcess,
    through: AdminClient,
    direct: AdminClient,
    frame: Callable[[], bytes],
    found: str,
) -> None:
    before = len(bounded.audit_events())
    closes, canaries, grew, names = attacked(bounded, through, frame)
    print(f"closed in max {max(closes):.3f}s, canaries {canaries}, RSS +{grew / MIB:.1f} MiB")
    assert max(closes) < CLOSED_WITHIN_S, closes
    assert max(canaries) < CANARY_WITHIN_S, canaries
    assert grew < RSS_ALLOWANCE, f"RSS grew by {grew / MIB:.1f} MiB"
    log = bounded.log_text()
    assert "oversized request: connection closed" in log and found in log
    # Nothing judged or recorded but the canaries; nothing of the flood reached the brokers.
    recorded = {e["topic"] for e in bounded.audit_events()[before:]}
    assert recorded <= set(names), recorded - set(names)
    topics = on_broker(direct)
    assert set(names) <= topics
    assert "bounds.flood-000000" not in topics


def test_over_the_bound_every_entry_is_answered_invalid_request(
    bounded: ProxyProcess, direct: AdminClient
) -> None:
    names = [f"bounds.over-{uuid.uuid4().hex[:6]}-{i}" for i in range(MAX_ENTRIES + 1)]
    wire = WireClient("127.0.0.1", BOOTSTRAP_PORT, timeout=60)
    try:
        response = wire.request(create_topics_request(*names))
    finally:
        wire.close()
    assert [t.name for t in response.topics] == names
    assert {int(t.error_code) for t in response.topics} == {INVALID_REQUEST}
    assert response.topics[0].error_message == (
        f"request too large: {MAX_ENTRIES + 1} entries; "
        f"limits.max_entries_per_request is {MAX_ENTRIES}"
    )
    assert not set(names) & on_broker(direct)


def test_two_thousand_ids_get_an_answer_in_proportion(bounded: ProxyProcess) -> None:
    ids = [uuid.uuid4() for _ in range(2000)]
    request = delete_by_id_request(*ids)
    wire = WireClient("127.0.0.1", BOOTSTRAP_PORT, timeout=60)
    try:
        began = time.monotonic()
        wire.send(request)
        frame = wire.read_frame()
        took = time.monotonic() - began
    finally:
        wire.close()
    print(f"2,000 ids: {len(encode(request))} bytes asked, {len(frame)} answered in {took:.2f}s")
    assert len(frame) <= ANSWER_BYTES_PER_ID * len(ids)
    response = decode_exact(response_class(20, 6), frame, 5)  # header v1: id and no tags
    assert [r.topic_id for r in response.responses] == ids
    # What a broker answers for ids it does not know.
    assert {int(r.error_code) for r in response.responses} == {UNKNOWN_TOPIC_ID}


def _alter_cleanup(admin: AdminClient, topic: str) -> KafkaError:
    """IncrementalAlterConfigs of cleanup.policy, which the policy needs the state to judge."""
    entry = ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource("topic", topic, incremental_configs=[entry])
    (future,) = admin.incremental_alter_configs([resource]).values()
    with pytest.raises(KafkaException) as raised:
        future.result(30)
    error: KafkaError = raised.value.args[0]
    return error


def test_an_alter_of_a_missing_topic_gets_the_brokers_own_error(
    bounded: ProxyProcess, through: AdminClient, direct: AdminClient
) -> None:
    topic = f"bounds.missing-{uuid.uuid4().hex[:8]}"
    assert topic not in on_broker(direct)
    by_proxy = _alter_cleanup(through, topic)
    by_broker = _alter_cleanup(direct, topic)
    assert by_proxy.code() == by_broker.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert "does not exist" in by_proxy.str()
    (record,) = [e for e in bounded.audit_events() if e["topic"] == topic]
    assert record["decision"] == "unknown-topic"
    assert [v["rule"] for v in record["violations"]] == ["unknown-topic"]
    assert topic not in on_broker(direct)


def _create_partitions_error(bootstrap: str, topic: str) -> tuple[int, str | None]:
    """CreatePartitions to 2 by kafka-python: the topic's error code and message."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    try:
        response = admin.create_partitions({topic: 2}, raise_errors=False)
    finally:
        admin.close()
    (result,) = response.results
    return result.error_code, result.error_message


def test_create_partitions_of_a_missing_topic_by_kafka_python(
    bounded: ProxyProcess, kafka: Any, direct: AdminClient
) -> None:
    topic = f"bounds.missing-{uuid.uuid4().hex[:8]}"
    code, message = _create_partitions_error(bounded.bootstrap, topic)
    broker_code, _ = _create_partitions_error(kafka.bootstrap_servers, topic)
    assert code == broker_code == UNKNOWN_TOPIC_OR_PARTITION
    assert message is not None and f"topic {topic!r} does not exist" in message
    assert topic not in on_broker(direct)
