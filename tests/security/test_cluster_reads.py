"""Attack: make one small request cost the cluster many reads (issue 31).

DeleteTopics v6 names topics by id; an id the proxy does not know must be looked up before the
request can be judged. A request of 1,000 made-up ids (36 KB) once made the proxy send six
1,000-id Metadata reads on its one cluster-state connection (9-15 s a request), and 20 such
connections held every other client's create for 30 s. The proxy's reads go through a counting
relay here, so what it asks of the cluster is counted outside the proxy.

Bounds asserted: a request makes the proxy name at most max_ids_per_request (100) unknown ids
to the cluster, in at most 2 Metadata requests, and is answered UNKNOWN_TOPIC_ID per id within
10 s; while 20 connections send such requests back to back, another client's creates each
take under 5 s.
"""

from __future__ import annotations

import importlib
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.messages import build
from harness.proxy_process import ProxyProcess
from kafka_policy_proxy.codec.registry import request_class
from tests.security.counting_relay import CountingRelay
from tests.security.raw import address, client, create_topics_request

pytestmark = pytest.mark.integration

BOOTSTRAP_PORT, NODE_PORT_BASE = 17900, 17910
UNKNOWN_TOPIC_ID = 100
POLICY = """\
version: 1
rules:
  - name: naming
    name_pattern: '[a-z0-9.-]+'
  - name: protected
    match: {topic: 'protected\\..+', actions: [delete]}
    deny: true
"""
MAX_IDS = 100
ANSWER_S, CANARY_S = 10.0, 5.0


@pytest.fixture(scope="module")
def relay(kafka: Any) -> Iterator[CountingRelay]:
    relay = CountingRelay(address(kafka.bootstrap_servers))
    yield relay
    relay.close()


@pytest.fixture(scope="module")
def proxy(
    kafka: Any, relay: CountingRelay, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProxyProcess]:
    workdir: Path = tmp_path_factory.mktemp("cluster-reads")
    (workdir / "policy.yaml").write_text(POLICY)
    host, port = relay.address
    process = ProxyProcess(
        workdir,
        kafka.bootstrap_servers,
        BOOTSTRAP_PORT,
        NODE_PORT_BASE,
        extra={
            "policy": {"file": str(workdir / "policy.yaml"), "watch": False},
            "cluster_state": {"bootstrap_servers": [f"{host}:{port}"]},
        },
    )
    yield process
    assert process.stop() == 0


def delete_by_ids(count: int) -> tuple[Any, list[uuid.UUID]]:
    """DeleteTopics v6 naming `count` random topic ids."""
    m = importlib.import_module(request_class(20, 6).__module__)
    ids = [uuid.uuid4() for _ in range(count)]
    topics = tuple(build(m.DeleteTopicState, name=None, topic_id=i) for i in ids)
    return build(m.DeleteTopicsRequest, topics=topics, timeout=30_000), ids


@pytest.mark.parametrize("count", [1000, 2000])
def test_made_up_ids_cost_a_bounded_read_and_are_each_answered_unknown(
    proxy: ProxyProcess, relay: CountingRelay, count: int
) -> None:
    wire = client(proxy.bootstrap)
    request, ids = delete_by_ids(count)
    before = relay.counts()
    try:
        started = time.monotonic()
        answer = wire.request(request)
        took = time.monotonic() - started
    finally:
        wire.close()
    requests, named = (after - was for after, was in zip(relay.counts(), before, strict=True))
    assert [(r.topic_id, int(r.error_code)) for r in answer.responses] == [
        (i, UNKNOWN_TOPIC_ID) for i in ids
    ]
    assert took < ANSWER_S
    assert named <= MAX_IDS
    assert requests <= 2
    print(f"{count} ids: {took:.2f} s, {requests} Metadata request(s) naming {named} topics")


def test_a_flood_of_made_up_ids_does_not_hold_another_clients_creates(
    proxy: ProxyProcess, relay: CountingRelay
) -> None:
    stop = threading.Event()
    errors: list[BaseException] = []

    def flood() -> None:
        wire = client(proxy.bootstrap)
        try:
            while not stop.is_set():
                wire.request(delete_by_ids(1000)[0])
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            wire.close()

    threads = [threading.Thread(target=flood) for _ in range(20)]
    for thread in threads:
        thread.start()
    canary = client(proxy.bootstrap)
    latencies = []
    try:
        time.sleep(2)  # the flood under way
        for i in range(10):
            started = time.monotonic()
            (result,) = canary.request(
                create_topics_request(f"canary.{uuid.uuid4().hex[:8]}.{i}")
            ).topics
            latencies.append(time.monotonic() - started)
            assert int(result.error_code) == 0, result
            time.sleep(0.2)
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
        canary.close()
    assert errors == []
    assert max(latencies) < CANARY_S, latencies
    latencies.sort()
    print(f"canary creates under the flood: p50 {latencies[5]:.3f} s, max {latencies[-1]:.3f} s")
