"""Attacks on the proxies' caches. First: delete a topic by id, then make the broker
auto-create it again with its defaults.

The topics are named so that the create rules deny them (the naming rule), and created on the
cluster directly. Once the proxy has cached them as existing, they are deleted by id through
the proxy, then asked for at once by Metadata with auto-creation on (as a producer asks) and by
a real producer: the proxy must judge that as a create, deny it, and the topic must not come
back. Checked on the brokers directly, after a fence; repeated, and raced against the delete.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

from harness.messages import metadata_request
from harness.proxy_process import ProxyProcess
from harness.wire import WireClient
from tests.integration.admin_clients import BrokerView
from tests.security.raw import (
    auto_create_request,
    client,
    create,
    delete_by_id_request,
    fence,
    wait_until,
)
from tests.security.stale_cache_support import (
    Brokers,
    connections_to_distinct_workers,
    create_partitions,
    create_topic,
    delete_topic,
    incremental_alter,
    legacy_alter,
    start_proxy,
    stop,
    unique,
    validate_only_alter,
)

pytestmark = pytest.mark.integration

LOOPS, RACES, PRODUCED = 30, 20, 3


@pytest.fixture
def proxy_wire(enforcing_proxy: ProxyProcess) -> Iterator[WireClient]:
    wire = client(enforcing_proxy.bootstrap)
    yield wire
    wire.close()


def existing(kafka: Any, proxy: WireClient, name: str) -> uuid.UUID:
    """Create a topic the create rules deny, on the cluster itself; the proxy has it cached."""
    direct = client(kafka.bootstrap_servers)
    try:
        topic_id = create(direct, name)
    finally:
        direct.close()
    probe = metadata_request((name,))
    for host, port in kafka.broker_addresses.values():
        wire = WireClient(host, port)

        def shows_it(wire: WireClient = wire) -> bool:
            return int(wire.request(probe).topics[0].error_code) == 0

        try:
            assert wait_until(shows_it)
        finally:
            wire.close()
    # The auto-create guard reads the topic's state through the cache: now it is cached.
    proxy.request(auto_create_request(name))
    return topic_id


def delete(proxy: WireClient, topic_id: uuid.UUID) -> None:
    (answer,) = proxy.request(delete_by_id_request(topic_id)).responses
    assert int(answer.error_code) == 0, answer


def recreated(kafka: Any, names: set[str]) -> set[str]:
    """Which of `names` exist on the brokers, once every earlier change is applied."""
    fence(kafka.bootstrap_servers, kafka.broker_addresses.values())
    return names & BrokerView(kafka.bootstrap_servers).topics()


def denied_creates(proxy: ProxyProcess, names: set[str]) -> set[str]:
    return {
        e["topic"]
        for e in proxy.audit_events()
        if e["topic"] in names and e["action"] == "create" and e["decision"] == "denied"
    }


def test_a_topic_deleted_by_id_is_not_auto_created_with_broker_defaults(
    enforcing_proxy: ProxyProcess, kafka: Any, proxy_wire: WireClient
) -> None:
    names = set()
    for i in range(LOOPS):
        name = f"Stale_{uuid.uuid4().hex[:10]}_{i}"
        names.add(name)
        topic_id = existing(kafka, proxy_wire, name)
        delete(proxy_wire, topic_id)
        proxy_wire.request(auto_create_request(name))
    assert recreated(kafka, names) == set()
    # Each re-creation was judged as a create, and denied by the create rules.
    assert denied_creates(enforcing_proxy, names) == names


def test_a_producer_to_a_deleted_topic_does_not_re_create_it(
    enforcing_proxy: ProxyProcess, kafka: Any, proxy_wire: WireClient
) -> None:
    names = {f"Stale_produce_{uuid.uuid4().hex[:10]}_{i}" for i in range(PRODUCED)}
    for name in names:
        delete(proxy_wire, existing(kafka, proxy_wire, name))
    producer = Producer(
        {
            "bootstrap.servers": enforcing_proxy.bootstrap,
            "message.timeout.ms": 3000,
            "log_level": 3,
        }
    )
    failed: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(msg.topic())

    for name in names:
        producer.produce(name, b"x", on_delivery=delivered)
    assert producer.flush(30) == 0
    assert sorted(failed) == sorted(names)
    assert recreated(kafka, names) == set()
    assert denied_creates(enforcing_proxy, names) == names


def test_a_delete_racing_auto_creation_never_lets_the_topic_back(
    enforcing_proxy: ProxyProcess, kafka: Any, proxy_wire: WireClient
) -> None:
    names = set()
    for i in range(RACES):
        name = f"Stale_race_{uuid.uuid4().hex[:10]}_{i}"
        names.add(name)
        topic_id = existing(kafka, proxy_wire, name)
        asker = client(enforcing_proxy.bootstrap)
        done = threading.Event()

        def ask(name: str = name, asker: WireClient = asker, done: threading.Event = done) -> None:
            # Before, during and after the delete, as a producer retrying its metadata.
            for _ in range(200):
                asker.request(auto_create_request(name))
                if done.is_set():
                    break
            for _ in range(5):
                asker.request(auto_create_request(name))

        thread = threading.Thread(target=ask)
        thread.start()
        try:
            delete(proxy_wire, topic_id)
        finally:
            done.set()
            thread.join(60)
            asker.close()
        assert not thread.is_alive()
    assert recreated(kafka, names) == set()


# -- Proxies do not share what they learnt (issue 31): a fact one proxy changed is not taken
# from another's cache. Each race changes a topic through proxy A, with proxy B's cache holding
# the topic as it was (B read it just before), then sends B the mutation that the old state
# would allow and the new state denies; the outcome is read on the brokers. A and B are two
# workers of one proxy (`--workers 2` and 4) or two proxy processes on different ports.

POLICY_VIOLATION = 44
UNKNOWN_TOPIC_OR_PARTITION = 3


@pytest.fixture(scope="module")
def topologies(
    kafka: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, list[WireClient]]]:
    """Connections to distinct proxies: two and four workers, and two processes."""
    base = tmp_path_factory.mktemp("stale-races")
    probe = unique("probe")
    brokers = Brokers(kafka)
    brokers.create(probe, 1, min_insync_replicas="2")
    processes: list[ProxyProcess] = []
    connections: dict[str, list[WireClient]] = {}
    try:
        for workers in (2, 4):
            workdir = base / f"workers-{workers}"
            processes.append(start_proxy(kafka, workdir, workers))
            connections[f"{workers} workers"] = connections_to_distinct_workers(
                processes[-1], workdir, probe, workers
            )
        processes += [start_proxy(kafka, base / f"instance-{i}") for i in (1, 2)]
        connections["2 instances"] = [client(p.bootstrap) for p in processes[-2:]]
        yield connections
    finally:
        for wires in connections.values():
            for wire in wires:
                wire.close()
        stop(processes)


def races(connections: list[WireClient]) -> list[tuple[WireClient, WireClient]]:
    """Each proxy changes, the next one is attacked (both ways for two)."""
    return [(a, connections[(i + 1) % len(connections)]) for i, a in enumerate(connections)]


TOPOLOGIES = ["2 workers", "4 workers", "2 instances"]


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_a_config_set_through_one_proxy_is_not_reset_through_another(
    kafka: Any, topologies: dict[str, list[WireClient]], topology: str
) -> None:
    brokers = Brokers(kafka)
    for a, b in races(topologies[topology]):
        topic = unique("stale.isr")
        brokers.create(topic, 1, min_insync_replicas="1")
        assert validate_only_alter(a, topic) == validate_only_alter(b, topic) == 0
        assert incremental_alter(a, topic, ("min.insync.replicas", 0, "2")) == 0
        # A full replacement that leaves the key out puts it back to the default, 1.
        assert legacy_alter(b, topic, retention_ms="3600000") == POLICY_VIOLATION
        assert brokers.settled().config(topic, "min.insync.replicas") == "2"


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_a_topic_re_created_smaller_through_one_proxy_cannot_grow_past_the_bound_through_another(
    kafka: Any, topologies: dict[str, list[WireClient]], topology: str
) -> None:
    brokers = Brokers(kafka)
    for a, b in races(topologies[topology]):
        topic = unique("stale.parts")
        brokers.create(topic, 5)
        assert validate_only_alter(a, topic) == validate_only_alter(b, topic) == 0
        assert delete_topic(a, topic) == 0
        assert wait_until(lambda a=a, t=topic: create_topic(a, t, 1, min_insync_replicas="2") == 0)
        # 1 -> 5 adds four partitions; B's old state (5) would make it none.
        assert create_partitions(b, topic, 5) == POLICY_VIOLATION
        assert brokers.settled().partitions(topic) == 1


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_a_topic_re_created_through_one_proxy_keeps_its_immutable_config_through_another(
    kafka: Any, topologies: dict[str, list[WireClient]], topology: str
) -> None:
    brokers = Brokers(kafka)
    for a, b in races(topologies[topology]):
        topic = unique("stale.exists")
        brokers.create(topic, 1, cleanup_policy="compact", min_insync_replicas="2")
        assert validate_only_alter(a, topic) == validate_only_alter(b, topic) == 0
        assert delete_topic(a, topic) == 0
        assert wait_until(
            lambda a=a, t=topic: (
                create_topic(a, t, 1, cleanup_policy="delete", min_insync_replicas="2") == 0
            )
        )
        # The topic B saw was compacted; the one that exists now is not, and may not become so.
        # Until the new topic reaches the broker B reads, B answers as that broker would
        # (UNKNOWN_TOPIC_OR_PARTITION); once it does, B must deny. The broker is read below.
        answers: list[int] = []

        def answered(b: WireClient = b, t: str = topic, answers: list[int] = answers) -> bool:
            answers.append(incremental_alter(b, t, ("cleanup.policy", 0, "compact")))
            return answers[-1] != UNKNOWN_TOPIC_OR_PARTITION

        assert wait_until(answered), answers
        assert answers[-1] == POLICY_VIOLATION, answers
        assert brokers.settled().config(topic, "cleanup.policy") == "delete"
