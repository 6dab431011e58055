"""The in-use guard against the real cluster: deletes of topics still written or read are denied.

A proxy enforces an `in_use` rule with a 5 s window on `iu.` topics, a 15 s consumer window on
`iu.g.` topics, and 10 minute windows for DeleteRecords on `iu.r.` topics and for the CLI's
deletes (a JVM's start would outlast 5 s). Real producers and consumers (confluent-kafka and
kafka-python, in threads) use the topics directly on the cluster; deletes go through the proxy
(the Java AdminClient, confluent-kafka's and Kafka's own CLI tools), and the broker, read
directly, shows every outcome: the topic still there or gone, the log start offset unmoved or
moved.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kafka import KafkaConsumer

from harness.proxy_process import ProxyProcess
from tests.integration.admin_clients import BrokerView, ConfluentAdmin, JavaAdmin, NewTopicSpec
from tests.integration.admin_clients.model import TopicOutcome
from tests.integration.enforcement_support import proxy_with_policy
from tests.integration.test_admin_clients import until

pytestmark = pytest.mark.integration

BOOTSTRAP_PORT, NODE_PORT_BASE = 26100, 26110
POLICY = {
    "version": 1,
    "rules": [
        {
            "name": "records-in-use",
            "match": {"topic_prefix": "iu.r.", "actions": ["delete_records"]},
            "in_use": {"consumed_within": "10m", "max_groups": 5000},
        },
        {
            "name": "cli-writes",
            "match": {"topic_prefix": "iu.r.cli.", "actions": ["delete"]},
            "in_use": {"written_within": "10m"},
        },
        {
            "name": "readers",
            "match": {"topic_prefix": "iu.g.", "actions": ["delete"]},
            "in_use": {"consumed_within": "15s"},
        },
        {
            "name": "in-use",
            "match": {"topic_prefix": "iu.", "actions": ["delete"]},
            "in_use": {"written_within": "5s", "consumed_within": "5s", "max_groups": 5000},
        },
    ],
}


@pytest.fixture(scope="module")
def proxy(kafka: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    workdir = tmp_path_factory.mktemp("in-use")
    yield from proxy_with_policy(kafka, workdir, POLICY, BOOTSTRAP_PORT, NODE_PORT_BASE)


@pytest.fixture(scope="module")
def broker(kafka: Any) -> BrokerView:
    return BrokerView(kafka.bootstrap_servers)


@pytest.fixture(scope="module")
def admin(kafka: Any, proxy: ProxyProcess) -> Iterator[JavaAdmin]:
    """The Java AdminClient: DeleteTopics v6 carries the denial's message to the client."""
    client = JavaAdmin(proxy.bootstrap, kafka.classpath())
    try:
        yield client
    finally:
        client.close()


def denial(proxy: ProxyProcess, topic: str) -> str:
    """The message of the topic's last audit event (DeleteRecords has no message field)."""
    [*_, last] = [e for e in proxy.audit_events() if e["topic"] == topic]
    assert last["decision"] == "denied", last
    return str(last["violations"][0]["message"])


def new_topic(kafka: Any, prefix: str, records: int, timestamp: int | None = None) -> str:
    """A topic made on the broker directly, with `records` records (at `timestamp`, ms)."""
    name = f"{prefix}{uuid.uuid4().hex[:8]}"
    direct = ConfluentAdmin(kafka.bootstrap_servers)
    [made] = direct.create_topics([NewTopicSpec(name, 1, 1)])
    assert made.ok, made
    produce(kafka, name, records, timestamp)
    return name


def produce(kafka: Any, topic: str, records: int, timestamp: int | None = None) -> None:
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "linger.ms": 0})
    for i in range(records):
        producer.produce(topic, f"r{i}".encode(), timestamp=timestamp or 0)
    assert producer.flush(30) == 0


def delete(admin: JavaAdmin, topic: str) -> TopicOutcome:
    [outcome] = admin.delete_topics([topic])
    return outcome


def exists(broker: BrokerView, topic: str) -> bool:
    return topic in broker.topics()


class LiveConsumer:
    """A consumer group member reading a topic in a thread until stopped, committing as it goes."""

    def __init__(self, kafka: Any, topic: str, group: str, library: str) -> None:
        self.consumed = 0
        self.restarts = 0
        self.error: Exception | None = None
        self._args = (kafka, topic, group, library)
        self._start()

    def _start(self) -> None:
        self._stop = threading.Event()
        self._poll, self._close = self._open(*self._args)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def restart(self) -> None:
        """A new member in place of one that never got going (a client stuck finding its
        group's coordinator after another test moved it), in the same group."""
        self.stop()
        self.restarts += 1
        self._start()

    @staticmethod
    def _open(
        kafka: Any, topic: str, group: str, library: str
    ) -> tuple[Callable[[], int], Callable[[], None]]:
        if library == "confluent":
            consumer = Consumer(
                {
                    "bootstrap.servers": kafka.bootstrap_servers,
                    "group.id": group,
                    "auto.offset.reset": "earliest",
                    "auto.commit.interval.ms": 200,
                }
            )
            consumer.subscribe([topic])

            def poll() -> int:
                message = consumer.poll(0.2)
                return 1 if message is not None and message.error() is None else 0

            return poll, consumer.close
        reader = KafkaConsumer(
            topic,
            bootstrap_servers=kafka.bootstrap_servers,
            group_id=group,
            auto_offset_reset="earliest",
            auto_commit_interval_ms=200,
        )

        def poll_kp() -> int:
            return sum(len(batch) for batch in reader.poll(200).values())

        return poll_kp, reader.close

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.consumed += self._poll()
        except Exception as exc:  # reported by the test that waits for the group
            self.error = exc
        finally:
            self._close()

    def committed_all(self, kafka: Any, group: str, topic: str, records: int) -> None:
        """Wait until the group has committed all `records`, or fail saying how far it got."""
        started = time.monotonic()
        deadline, restart = started + 120, started + 30
        while (offset := committed(kafka, group, topic)) != records:
            now = time.monotonic()
            assert now < deadline, (
                f"group {group} never committed offset {records} of {topic} in 120 s: consumed "
                f"{self.consumed}, committed {offset}, consumer error {self.error!r}, "
                f"{self.restarts} restart(s)"
            )
            if self.consumed == 0 and now > restart:
                self.restart()
                restart = now + 30
            time.sleep(0.2)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive()


def committed(kafka: Any, group: str, topic: str) -> int | None:
    """The group's committed offset on partition 0, read from the broker (None while its
    coordinator is still moving)."""
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": group})
    try:
        [tp] = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        return tp.offset if tp.offset >= 0 else None
    except KafkaException:
        return None
    finally:
        consumer.close()


def test_a_topic_being_written_is_not_deleted_until_the_writes_stop(
    kafka: Any, admin: JavaAdmin, broker: BrokerView
) -> None:
    topic = new_topic(kafka, "iu.w.", 3)
    denied = delete(admin, topic)
    assert not denied.ok and denied.error == "POLICY_VIOLATION", denied
    assert "[in-use]" in (denied.message or "") and "last written at 20" in (denied.message or "")
    assert "before the check" in (denied.message or "")
    assert exists(broker, topic)
    # No writes for the window: the same delete goes through.
    assert until(lambda: delete(admin, topic).ok or None, timeout=30)
    assert until(lambda: not exists(broker, topic) or None)


@pytest.mark.parametrize("library", ["confluent", "kafka-python"])
def test_a_topic_a_live_group_reads_is_not_deleted_until_the_group_stops(
    kafka: Any, admin: JavaAdmin, broker: BrokerView, library: str
) -> None:
    # Written an hour ago: only the group keeps it in use.
    topic = new_topic(kafka, "iu.c.", 5, round(time.time() * 1000) - 3_600_000)
    group = f"iu-readers-{uuid.uuid4().hex[:6]}"
    consumer = LiveConsumer(kafka, topic, group, library)
    try:
        consumer.committed_all(kafka, group, topic, 5)
        denied = delete(admin, topic)
        assert not denied.ok and denied.error == "POLICY_VIOLATION", denied
        assert f"consumer group(s) '{group}' (members on the topic)" in (denied.message or "")
        assert exists(broker, topic)
    finally:
        consumer.stop()
    # The group is gone from the topic and its last consumed record is an hour old.
    assert until(lambda: delete(admin, topic).ok or None, timeout=30)
    assert until(lambda: not exists(broker, topic) or None)


def test_a_group_that_consumed_within_the_window_keeps_the_topic_until_it_passes(
    kafka: Any, admin: JavaAdmin, broker: BrokerView, proxy: ProxyProcess
) -> None:
    topic = new_topic(kafka, "iu.g.", 4)
    group = f"iu-recent-{uuid.uuid4().hex[:6]}"
    consumer = LiveConsumer(kafka, topic, group, "confluent")
    consumer.committed_all(kafka, group, topic, 4)
    consumer.stop()
    outcomes = []
    deadline = time.monotonic() + 60
    while not (outcome := delete(admin, topic)).ok and time.monotonic() < deadline:
        outcomes.append(outcome)
        time.sleep(0.5)
    assert outcome.ok and outcomes, outcomes
    # Denied while the last record it consumed was within the 15 s window.
    named = f"[readers] topic '{topic}' is in use: consumer group(s) '{group}' (consumed a record"
    assert any(named in (o.message or "") for o in outcomes), outcomes
    assert until(lambda: not exists(broker, topic) or None)
    records = [e for e in proxy.audit_events() if e["topic"] == topic]
    seen = records[-1]["in_use"]
    assert seen["topic"] == topic and seen["groups"][0]["group"] == group
    assert seen["groups"][0]["committed"] == {"0": 4} and seen["groups"][0]["members"] is False


def test_delete_records_stops_at_the_lowest_offset_an_active_group_committed(
    kafka: Any, admin: JavaAdmin, broker: BrokerView, proxy: ProxyProcess
) -> None:
    topic = new_topic(kafka, "iu.r.", 10)
    slow, fast = f"iu-slow-{uuid.uuid4().hex[:6]}", f"iu-fast-{uuid.uuid4().hex[:6]}"
    for group, offset in ((slow, 4), (fast, 9)):
        committer = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": group})
        committer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
        committer.close()
    librdkafka = ConfluentAdmin(proxy.bootstrap)
    for beyond, target in ((8, 8), (-1, 10)):
        for client in (admin, librdkafka):
            [denied] = client.delete_records({(topic, 0): beyond})
            assert not denied.ok, denied
            assert broker.low_watermarks(topic) == {0: 0}
            assert denial(proxy, topic) == (
                f"[records-in-use] topic '{topic}': partition 0: deleting before offset {target} "
                f"would delete records group '{slow}' has not consumed (committed offset 4, the "
                "lowest of 2 active groups); records may be deleted up to offset 4"
            )
    [allowed] = admin.delete_records({(topic, 0): 4})
    assert allowed.ok, allowed
    assert until(lambda: broker.low_watermarks(topic) == {0: 4} or None)


def tool(kafka: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        kafka.tool_command(*args), capture_output=True, text=True, timeout=120, check=False
    )


def test_kafka_cli_tools_are_denied_too(
    kafka: Any, proxy: ProxyProcess, broker: BrokerView, tmp_path: Any
) -> None:
    topic = new_topic(kafka, "iu.r.cli.", 6)
    committer = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": f"{topic}-g"})
    committer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
    committer.close()
    offsets = tmp_path / "offsets.json"
    plan = {"version": 1, "partitions": [{"topic": topic, "partition": 0, "offset": 5}]}
    offsets.write_text(json.dumps(plan))
    records = tool(
        kafka,
        "kafka-delete-records",
        "--bootstrap-server",
        proxy.bootstrap,
        "--offset-json-file",
        str(offsets),
    )
    assert "PolicyViolationException" in records.stdout + records.stderr, records
    assert broker.low_watermarks(topic) == {0: 0}
    produce(kafka, topic, 1)
    topics = tool(
        kafka, "kafka-topics", "--bootstrap-server", proxy.bootstrap, "--delete", "--topic", topic
    )
    assert "is in use: last written at" in topics.stdout + topics.stderr, topics
    assert exists(broker, topic)
