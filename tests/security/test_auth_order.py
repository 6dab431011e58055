"""Attack: send a mutation on a connection whose SASL authentication has not completed.

A broker closes a connection that sends a non-SASL request mid-exchange; the proxy must do the
same before judging anything, so that nothing is ever decided (let alone allowed) for
`User:ANONYMOUS` there. The refusal is in the proxy's log and in the audit log, as one denied
record per refused request with no principal (rule `authentication-order`) and nothing else on
that connection; no record names the topic, and the brokers, read directly after a fence, have
no such topic. Repeated and raced on many connections at once, in front of the PLAINTEXT
listener (whose broker would otherwise accept the request) and in front of the SASL listener.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from harness.messages import build
from harness.proxy_process import ProxyProcess, sasl_enforcing_proxy
from harness.wire import WireClient
from kafka_policy_proxy.codec.registry import request_class
from tests.integration.admin_clients import BrokerView
from tests.integration.cluster_fixtures import TEST_POLICY
from tests.security.raw import auto_create_request, client, create_topics_request, fence

pytestmark = pytest.mark.integration

ATTEMPTS = 40
NEVER_STARTED = 10
REFUSAL = "request refused: sent before SASL authentication completed"
RULE = "authentication-order"


@pytest.fixture(scope="module")
def sasl_front(kafka: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    """An enforcing proxy in front of the brokers' SASL listener."""
    workdir = tmp_path_factory.mktemp("sasl-front")
    # Ports no other module uses (test_upstream_tls has 31600/31700).
    process = sasl_enforcing_proxy(workdir, kafka, TEST_POLICY, (31900, 31950), "PLAIN")
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


def audited(events: list[dict[str, Any]], refusals: dict[str, int]) -> None:
    """The events hold exactly one denied, principal-less record per refused request, by API."""
    refused = [e for e in events if e["request"].get("refused") == RULE]
    assert Counter(e["api"] for e in refused) == refusals
    for event in refused:
        assert (event["principal"], event["decision"], event["mode"]) == ("", "denied", "enforce")
        assert (event["resource_type"], event["resource"], event["topic"]) == (
            "api",
            event["api"],
            None,
        )
        [violation] = event["violations"]
        assert violation["rule"] == RULE
        assert violation["message"].endswith("; connection closed")
    # Each refused request had its own connection, and nothing on it was judged or recorded.
    assert len({e["conn"] for e in refused}) == len(refused)
    assert [e for e in events if e not in refused] == []
    assert [e for e in events if e["principal"] == "User:ANONYMOUS"] == []


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
    before, seen = refused(enforcing_proxy), len(enforcing_proxy.audit_events())
    names, results = race(enforcing_proxy.bootstrap, "auth-order")
    assert all(results)
    assert refused(enforcing_proxy) - before == ATTEMPTS
    audited(enforcing_proxy.audit_events()[seen:], {"CreateTopics": ATTEMPTS})
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
    before, seen = refused(sasl_front), len(sasl_front.audit_events())
    names, results = race(sasl_front.bootstrap, "auth-sasl")
    skipped = set()
    for i in range(NEVER_STARTED):
        # Never even starting SASL: a create, or a Metadata request that would auto-create.
        name = f"auth-none.{uuid.uuid4().hex[:10]}"
        skipped.add(name)
        wire = client(sasl_front.bootstrap)
        try:
            wire.send(auto_create_request(name) if i % 2 else create_topics_request(name))
            results.append(closed(wire))
        finally:
            wire.close()
    assert all(results)
    metadata = NEVER_STARTED // 2
    creates = ATTEMPTS + NEVER_STARTED - metadata
    assert refused(sasl_front) - before == creates
    audited(sasl_front.audit_events()[seen:], {"CreateTopics": creates, "Metadata": metadata})
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
    assert [e for e in sasl_front.audit_events() if e["conn"] == event["conn"]] == [event]
    direct = AdminClient({"bootstrap.servers": kafka.bootstrap_servers, "log_level": 3})
    direct.delete_topics([name])[name].result(60)
