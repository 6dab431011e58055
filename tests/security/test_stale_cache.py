"""Attack: delete a topic by id, then make the broker auto-create it again with its defaults.

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
