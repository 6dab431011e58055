"""Attack: send a mutation on a connection whose SASL authentication has not completed.

A broker closes a connection that sends a non-SASL request mid-exchange; the proxy must do the
same before judging anything, so that nothing is ever decided (let alone allowed) for
`User:ANONYMOUS` there. The refusal is in the proxy's log, the audit log has no decision for
the topic, and the brokers, read directly after a fence, have no such topic. Repeated and
raced on many connections at once, in front of the PLAINTEXT listener (whose broker would
otherwise accept the request) and in front of the SASL listener.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from codec.registry import request_class
from tests.integration.admin_clients import BrokerView
from tests.integration.cluster_fixtures import TEST_POLICY
from tests.integration.support import ProxyProcess, sasl_enforcing_proxy
from tests.messages import build
from tests.security.raw import client, create_topics_request, fence
from tests.wire import WireClient

pytestmark = pytest.mark.integration

ATTEMPTS = 40
REFUSAL = "request refused: sent before SASL authentication completed"


@pytest.fixture(scope="module")
def sasl_front(kafka: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    """An enforcing proxy in front of the brokers' SASL listener."""
    workdir = tmp_path_factory.mktemp("sasl-front")
    process = sasl_enforcing_proxy(workdir, kafka, TEST_POLICY, (31600, 31700), "PLAIN")
    yield process
    assert process.stop() == 0


def handshake() -> Any:
    return build(request_class(17, 1), mechanism="PLAIN")


def authenticate(user: str) -> Any:
    return build(request_class(36, 2), auth_bytes=f"\0{user}\0{user}-secret".encode())


def closed(wire: WireClient, timeout: float = 10.0) -> bool:
    """Whether the peer closes the connection (answers already owed may come first)."""
    deadline = time.monotonic() + timeout
    wire.sock.settimeout(timeout)
    try:
        while time.monotonic() < deadline:
            wire.read_frame()
    except (ConnectionError, OSError):
        return True
    return False


def attempt(bootstrap: str, name: str, wait_for_handshake: bool) -> bool:
    """SaslHandshake, then (pipelined, or after its answer) CreateTopics before authenticating."""
    wire = client(bootstrap)
    try:
        wire.send(handshake())
        if wait_for_handshake:
            wire.receive()
        wire.send(create_topics_request(name))
        return closed(wire)
    finally:
        wire.close()


def refused(proxy: ProxyProcess) -> int:
    return sum(
        1 for line in proxy.log_text().splitlines() if REFUSAL in line and "CreateTopics" in line
    )


def no_trace(proxy: ProxyProcess, kafka: Any, names: set[str]) -> None:
    """No decision about the names was recorded, and none of them exists on the brokers."""
    assert [e for e in proxy.audit_events() if e["topic"] in names] == []
    fence(kafka.bootstrap_servers, kafka.broker_addresses.values())
    assert names & BrokerView(kafka.bootstrap_servers).topics() == set()


def race(bootstrap: str, prefix: str) -> tuple[set[str], list[bool]]:
    names = [f"{prefix}.{uuid.uuid4().hex[:10]}-{i}" for i in range(ATTEMPTS)]
    with ThreadPoolExecutor(8) as pool:
        results = list(
            pool.map(lambda i: attempt(bootstrap, names[i], i % 2 == 0), range(ATTEMPTS))
        )
    return set(names), results


def test_a_create_before_sasl_completes_closes_the_connection_and_creates_nothing(
    enforcing_proxy: ProxyProcess, kafka: Any
) -> None:
    before = refused(enforcing_proxy)
    names, results = race(enforcing_proxy.bootstrap, "auth-order")
    assert all(results)
    assert refused(enforcing_proxy) - before == ATTEMPTS
    no_trace(enforcing_proxy, kafka, names)


def test_in_front_of_a_sasl_listener_unauthenticated_mutations_never_pass(
    sasl_front: ProxyProcess, kafka: Any
) -> None:
    # A client that authenticates shows the proxy that this listener's broker wants SASL.
    wire = client(sasl_front.bootstrap)
    try:
        assert int(wire.request(handshake()).error_code) == 0
        assert int(wire.request(authenticate("alice")).error_code) == 0
    finally:
        wire.close()
    before = refused(sasl_front)
    names, results = race(sasl_front.bootstrap, "auth-sasl")
    skipped = set()
    for _ in range(ATTEMPTS // 4):
        # Never even starting SASL.
        name = f"auth-none.{uuid.uuid4().hex[:10]}"
        skipped.add(name)
        wire = client(sasl_front.bootstrap)
        try:
            wire.send(create_topics_request(name))
            results.append(closed(wire))
        finally:
            wire.close()
    assert all(results)
    assert refused(sasl_front) - before == ATTEMPTS + ATTEMPTS // 4
    no_trace(sasl_front, kafka, names | skipped)


def test_an_authenticated_connection_is_judged_as_its_principal(
    sasl_front: ProxyProcess, kafka: Any
) -> None:
    name = f"alice.auth-{uuid.uuid4().hex[:10]}"
    wire = client(sasl_front.bootstrap)
    try:
        wire.request(handshake())
        assert int(wire.request(authenticate("alice")).error_code) == 0
        (result,) = wire.request(create_topics_request(name)).topics
    finally:
        wire.close()
    assert int(result.error_code) == 0, result
    [event] = [e for e in sasl_front.audit_events() if e["topic"] == name]
    assert (event["principal"], event["decision"]) == ("User:alice", "allowed")
    direct = AdminClient({"bootstrap.servers": kafka.bootstrap_servers, "log_level": 3})
    direct.delete_topics([name])[name].result(60)
