"""Fair turns and the rate of guarded entries, through the real proxy in front of the cluster.

Ten connections loop CreateTopics validate_only batches of 5,000 topics (the issue's flood)
while a canary on another connection creates one topic every 100 ms. Before admission, one
worker gave the canary a p99 of 30 s (44 creates in 40 s). The flood's names are ones the
policy denies, so the proxy answers them and the brokers never see them: what is measured is
the proxy's fairness. (Allowed validate_only batches are forwarded, and the brokers' own
controller then delays a create as much for a client connected directly: measured 6.4 s p50
direct and 5.9 s through the proxy.) Each flood connection is its own flow (User:ANONYMOUS),
and the rate is set out of reach here, so this is fair turns at work. Then a principal over
its rate is throttled as a broker's controller mutation quota throttles
(THROTTLING_QUOTA_EXCEEDED, throttle_time_ms), and the Java AdminClient retries after the
throttle and succeeds. Every outcome is read on the brokers.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import shutil
import statistics
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from harness.messages import build
from harness.proxy_process import ProxyProcess
from harness.wire import WireClient
from kafka_policy_proxy.codec.framing import framed
from kafka_policy_proxy.codec.header import request_header
from kafka_policy_proxy.codec.registry import encode, request_class
from tests.integration.admin_clients import BrokerView, JavaAdmin, NewTopicSpec
from tests.integration.cluster_fixtures import TEST_POLICY
from tests.security.raw import address, create_topics_request

pytestmark = pytest.mark.integration

FLOODERS = 10
BATCH = 5000
CANARY_EVERY_S = 0.1
CANARY_FOR_S = 12.0  # 20 s measured the figures below; 12 keeps the suite's floods short
# The canary's p99 bound. A single create runs at once in the lane of small requests (or, that
# lane full, at the next free slot), never behind the batches queued; what is left is sharing
# the event loop and the cluster-state reads with the two batches in progress. Measured (load
# ~3.5 on 2 cores): p99 1.45 s, 56 creates in 20 s. With the turns off (256 slots): p99 8.9 s.
# The commit before: 1 create in 12 s at 14 s (bench/admission.py); the issue: p99 30 s.
CANARY_P99_BOUND_S = 5.0
FAIR_PORTS = (30960, 30970)
RATE = 50
BURST = 100
DEBT_S = 5  # long enough to outlast a busy machine's delays before the next request
THROTTLED_PORTS = (30980, 30990)
ADMIN_PORT = 30995
THROTTLING_QUOTA_EXCEEDED, POLICY_VIOLATION = 89, 44


def proxy(kafka_bootstrap: str, workdir: Any, ports: tuple[int, int], **extra: Any) -> ProxyProcess:
    policy = workdir / "policy.yaml"
    shutil.copy(TEST_POLICY, policy)
    return ProxyProcess(
        workdir,
        kafka_bootstrap,
        *ports,
        extra={"policy": {"file": str(policy), "watch": False}, **extra},
    )


@pytest.fixture(scope="module")
def fair(kafka: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    """One worker, default turns; the rate out of reach so that only the turns protect."""
    process = proxy(
        kafka.bootstrap_servers,
        tmp_path_factory.mktemp("fair"),
        FAIR_PORTS,
        admission={"entries_per_second": 1e9, "burst": 10**9},
    )
    yield process
    assert process.stop() == 0


def flood_frame(names: list[str]) -> bytes:
    """One CreateTopics v7 validate_only frame, encoded once and sent again and again."""
    m = importlib.import_module(request_class(19, 7).__module__)
    topics = tuple(
        build(
            m.CreatableTopic,
            name=n,
            num_partitions=1,
            replication_factor=1,
            assignments=(),
            configs=(),
        )
        for n in names
    )
    body = encode(build(m.CreateTopicsRequest, topics=topics, timeout=60_000, validate_only=True))
    return framed(request_header(19, 7, 1, "flood"), body)


def flood(bootstrap: str, frame: bytes, stop: threading.Event, answered: list[int]) -> None:
    """Send the batch, wait for its answer, again, until stopped."""
    wire = WireClient(*address(bootstrap), timeout=120)
    try:
        while not stop.is_set():
            wire.send_raw(frame)
            wire.read_frame()
            answered.append(1)
    finally:
        wire.close()


def delete_topics(kafka: Any, names: list[str]) -> None:
    """Delete topics straight on the brokers (the admin client lives until they are gone)."""
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    for future in admin.delete_topics(names).values():
        future.result()


def p99(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[98]


def test_big_batches_cannot_starve_another_connections_creates(
    fair: ProxyProcess, kafka: Any
) -> None:
    names = [f"flood_t{i:05d}" for i in range(BATCH)]  # no dot: the naming rule denies them
    probe = WireClient(*address(fair.bootstrap), timeout=120)
    denied = probe.request(dataclasses.replace(create_topics_request(*names), validate_only=True))
    probe.close()
    assert {int(t.error_code) for t in denied.topics} == {POLICY_VIOLATION}
    frame = flood_frame(names)
    stop = threading.Event()
    answered: list[int] = []
    flooders = [
        threading.Thread(target=flood, args=(fair.bootstrap, frame, stop, answered), daemon=True)
        for _ in range(FLOODERS)
    ]
    for t in flooders:
        t.start()
    canary = WireClient(*address(fair.bootstrap), timeout=120)
    prefix = f"fair.canary-{uuid.uuid4().hex[:8]}"
    created: list[str] = []
    latencies: list[float] = []
    try:
        while len(answered) < FLOODERS:  # every flood connection has had a batch judged
            time.sleep(0.1)
        begin = time.monotonic()
        tick = begin
        while time.monotonic() - begin < CANARY_FOR_S:
            name = f"{prefix}-{len(latencies)}"
            sent = time.monotonic()
            response = canary.request(create_topics_request(name))
            latencies.append(time.monotonic() - sent)
            assert [int(t.error_code) for t in response.topics] == [0], response
            created.append(name)
            tick = max(tick + CANARY_EVERY_S, time.monotonic())
            time.sleep(max(0.0, tick - time.monotonic()))
        during = len(answered)
    finally:
        stop.set()
        canary.close()
        for t in flooders:
            t.join(timeout=120)
    # The flood ran throughout: batches were judged while the canary created.
    assert during >= 2 * FLOODERS
    worst = p99(latencies)
    print(
        f"canary: {len(latencies)} creates, p50 {statistics.median(latencies):.3f} s, "
        f"p99 {worst:.3f} s, max {max(latencies):.3f} s; {during} flood batches answered"
    )
    assert worst < CANARY_P99_BOUND_S
    # Read on the brokers: every create the canary was told succeeded exists.
    deadline = time.monotonic() + 30
    while set(created) - BrokerView(kafka.bootstrap_servers).topics():
        assert time.monotonic() < deadline, "canary topics missing on the brokers"
        time.sleep(0.5)
    delete_topics(kafka, created)


@pytest.fixture(scope="module")
def throttled(kafka: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    """In front of the SASL listener, so that a principal's connections share one rate."""
    process = proxy(
        kafka.sasl_bootstrap_servers,
        tmp_path_factory.mktemp("throttled"),
        THROTTLED_PORTS,
        admission={"entries_per_second": RATE, "burst": BURST},
        admin={"bind_host": "127.0.0.1", "port": ADMIN_PORT},
        cluster_state={
            "sasl": {"mechanism": "PLAIN", "username": "admin", "password": "admin-secret"}
        },
    )
    yield process
    assert process.stop() == 0


def logged_in(bootstrap: str, user: str) -> WireClient:
    """A raw connection authenticated with SASL PLAIN as `user`."""
    wire = WireClient(*address(bootstrap), timeout=60)
    wire.request(build(request_class(17, 1), mechanism="PLAIN"))
    answer = wire.request(
        build(request_class(36, 2), auth_bytes=f"\0{user}\0{user}-secret".encode())
    )
    assert int(answer.error_code) == 0, answer
    return wire


def in_debt(bootstrap: str, user: str) -> WireClient:
    """`user` sends one validate_only batch over its burst: admitted, and DEBT_S in debt."""
    wire = logged_in(bootstrap, user)
    names = [f"throttle.v{i}" for i in range(BURST + DEBT_S * RATE)]
    request = create_topics_request(*names)
    batch = wire.request(dataclasses.replace(request, validate_only=True))
    assert {int(t.error_code) for t in batch.topics} == {0}
    return wire


def throttled_count() -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{ADMIN_PORT}/metrics", timeout=10).read()
    found = re.search(
        rb'kpp_admission_throttled_total\{api="CreateTopics",reason="rate"\} ([0-9.e+]+)', text
    )
    return 0.0 if found is None else float(found.group(1))


def test_a_principal_over_its_rate_is_throttled_with_the_brokers_error(
    throttled: ProxyProcess, kafka: Any
) -> None:
    wire = in_debt(throttled.bootstrap, "bob")
    name = f"throttle.raw-{uuid.uuid4().hex[:8]}"
    try:
        # Another connection of the same principal shares the debt: 50 entries at 50/s.
        other = logged_in(throttled.bootstrap, "bob")
        answer = other.request(create_topics_request(name))
        other.close()
    finally:
        wire.close()
    assert [int(t.error_code) for t in answer.topics] == [THROTTLING_QUOTA_EXCEEDED]
    assert 0 < answer.throttle_time.total_seconds() <= DEBT_S
    assert "admission.entries_per_second" in answer.topics[0].error_message
    assert name not in BrokerView(kafka.bootstrap_servers).topics()
    # Another principal has a rate of its own.
    admin = logged_in(throttled.bootstrap, "admin")
    try:
        assert admin.request(create_topics_request(name)).topics[0].error_code == 0
    finally:
        admin.close()
    delete_topics(kafka, [name])


def test_the_java_admin_client_retries_after_the_throttle_and_succeeds(
    throttled: ProxyProcess, kafka: Any
) -> None:
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="alice" password="alice-secret";'
    )
    java = JavaAdmin(
        throttled.bootstrap,
        kafka.classpath(),
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": jaas,
        },
    )
    name = f"throttle.java-{uuid.uuid4().hex[:8]}"
    try:
        before = throttled_count()
        in_debt(throttled.bootstrap, "alice").close()
        began = time.monotonic()
        [outcome] = java.create_topics([NewTopicSpec(name, 1, 1)])
        took = time.monotonic() - began
    finally:
        java.close()
    assert outcome.ok, outcome
    assert throttled_count() > before  # it was throttled at least once, then retried
    assert took >= 0.5  # it waited out (most of) the 1 s debt rather than failing
    assert name in BrokerView(kafka.bootstrap_servers).topics()
    delete_topics(kafka, [name])
