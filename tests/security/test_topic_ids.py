"""Attack: delete protected topics by id right after their creation, before any cache has them.

Each loop creates a `protected.*` topic (through the proxy, or on the cluster directly so the
proxy never saw it) and at once sends DeleteTopics v6 naming it by id only. The policy denies
deleting protected topics, so none may disappear: checked on the brokers directly, after a
fence. Loops run in parallel threads, and alongside the Java AdminClient's
deleteTopics(TopicCollection.ofTopicIds(...)).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from harness.proxy_process import ProxyProcess
from tests.integration.admin_clients import BrokerView, JavaAdmin
from tests.security.raw import client, create, delete_by_id_request, fence

pytestmark = pytest.mark.integration

POLICY_VIOLATION, UNKNOWN_TOPIC_ID = 44, 100
RAW_THREADS, RAW_LOOPS, JAVA_LOOPS = 4, 50, 200


@pytest.fixture(scope="module")
def java(enforcing_proxy: ProxyProcess, kafka: Any) -> Iterator[JavaAdmin]:
    admin = JavaAdmin(enforcing_proxy.bootstrap, kafka.classpath())
    yield admin
    admin.close()


@pytest.fixture(scope="module")
def created(kafka: Any) -> Iterator[list[str]]:
    """Names of the topics the tests created; deleted on the cluster itself at the end."""
    names: list[str] = []
    yield names
    view = BrokerView(kafka.bootstrap_servers)
    # Deleted directly (the proxy would refuse): bookkeeping, not part of the attack.
    direct = AdminClient({"bootstrap.servers": kafka.bootstrap_servers, "log_level": 3})
    existing = [n for n in names if n in view.topics()]
    for future in direct.delete_topics(existing).values() if existing else ():
        future.result(60)


def raw_loops(proxy: ProxyProcess, kafka: Any, thread: int, names: list[str]) -> list[Any]:
    """Create-then-delete-by-id loops on one proxy connection; every by-id answer, in order."""
    wire = client(proxy.bootstrap)
    direct = client(kafka.bootstrap_servers)
    answers = []
    try:
        for i in range(RAW_LOOPS):
            name = f"protected.ids-{uuid.uuid4().hex[:10]}-{thread}-{i}"
            names.append(name)
            # Half through the proxy, half behind its back (its cache never heard of them).
            topic_id = create(wire if i % 2 else direct, name)
            (answer,) = wire.request(delete_by_id_request(topic_id)).responses
            answers.append((name, topic_id, answer))
    finally:
        wire.close()
        direct.close()
    return answers


def java_loops(proxy: ProxyProcess, kafka: Any, java: JavaAdmin, names: list[str]) -> list[Any]:
    """The same attack with the Java AdminClient deleting by id."""
    direct = client(kafka.bootstrap_servers)
    outcomes = []
    try:
        for i in range(JAVA_LOOPS):
            name = f"protected.jids-{uuid.uuid4().hex[:10]}-{i}"
            names.append(name)
            topic_id = create(direct, name)
            (outcome,) = java.delete_topics_by_id([topic_id])
            outcomes.append((name, outcome))
    finally:
        direct.close()
    return outcomes


def test_protected_topics_cannot_be_deleted_by_id_as_they_are_created(
    enforcing_proxy: ProxyProcess, kafka: Any, java: JavaAdmin, created: list[str]
) -> None:
    with ThreadPoolExecutor(RAW_THREADS + 1) as pool:
        raw = [
            pool.submit(raw_loops, enforcing_proxy, kafka, t, created) for t in range(RAW_THREADS)
        ]
        by_java = pool.submit(java_loops, enforcing_proxy, kafka, java, created)
        answers = [a for future in raw for a in future.result()]
        outcomes = by_java.result()
    assert len(answers) == RAW_THREADS * RAW_LOOPS and len(outcomes) == JAVA_LOOPS

    for name, topic_id, answer in answers:
        # Denied by the policy, under the topic's name; at worst not resolved yet: never gone.
        assert int(answer.error_code) in {POLICY_VIOLATION, UNKNOWN_TOPIC_ID}, (name, answer)
        assert answer.topic_id == topic_id
        if int(answer.error_code) == POLICY_VIOLATION:
            assert answer.name == name, answer
    for name, outcome in outcomes:
        assert not outcome.ok and outcome.error in {"POLICY_VIOLATION", "UNKNOWN_TOPIC_ID"}, (
            name,
            outcome,
        )

    fence(kafka.bootstrap_servers, kafka.broker_addresses.values())
    missing = set(created) - BrokerView(kafka.bootstrap_servers).topics()
    assert missing == set()
    names = set(created)
    allowed = [
        e
        for e in enforcing_proxy.audit_events()
        if e["topic"] in names and e["action"] == "delete" and e["decision"] != "denied"
    ]
    assert allowed == []


def test_an_unknown_id_is_answered_unknown_topic_id_by_the_proxy(
    enforcing_proxy: ProxyProcess, kafka: Any, java: JavaAdmin
) -> None:
    unknown = [uuid.uuid4() for _ in range(3)]
    wire = client(enforcing_proxy.bootstrap)
    try:
        answers = wire.request(delete_by_id_request(*unknown)).responses
    finally:
        wire.close()
    assert [(a.name, a.topic_id, int(a.error_code)) for a in answers] == [
        (None, i, UNKNOWN_TOPIC_ID) for i in unknown
    ]
    assert all(a.error_message for a in answers)
    (outcome,) = java.delete_topics_by_id([unknown[0]])
    assert outcome.error == "UNKNOWN_TOPIC_ID"
