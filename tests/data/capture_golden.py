"""Capture golden frames of the guarded admin APIs from real clients (a dev script, not a test).

Run from the checkout: .venv/bin/python -m tests.data.capture_golden

Starts a one-broker Kafka with harness/local_kafka/ (port base 25092, a temp directory), puts
a recording TCP relay (harness/recording_relay.py) in front of it (the broker advertises the
relay's port, so every connection goes through it), drives confluent-kafka, kafka-python and
the Java AdminClient through every guarded API, then sends duplicate-topic batches with the raw
wire client to record what the broker itself answers. Writes tests/data/golden/ and a
manifest.json.
"""

from __future__ import annotations

import datetime
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from harness.local_kafka import LocalKafka
from harness.messages import build
from harness.recording_relay import METADATA, Capture, Recorder, serve
from harness.wire import WireClient
from kafka_policy_proxy.codec.guarded.base import element_class
from kafka_policy_proxy.codec.registry import request_class

HERE = Path(__file__).resolve().parent
OUT = HERE / "golden"
PORT_BASE = 25092
RELAY_PORT = 25390
DUPLICATE_WAIT = 20.0
# client.id -> the folder its exchanges are written to.
CLIENTS = {
    "golden-confluent": "confluent-kafka",
    "golden-kafka-python": "kafka-python",
    "golden-java": "java-adminclient",
    "wire-test": "broker-duplicates",
}


def _settle(what: str, call: Any) -> None:
    try:
        result = call()
        print(f"  {what}: ok {'' if result is None else str(result)[:100]}")
    except Exception as exc:
        print(f"  {what}: {type(exc).__name__}: {str(exc)[:160]}")


def _confluent(bootstrap: str) -> None:
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        NewTopic,
    )

    print("confluent-kafka")
    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "golden-confluent"})

    def wait(futures: Any) -> None:
        for future in futures.values():
            future.result()

    topics = [
        NewTopic("ck-plain", num_partitions=3, replication_factor=1),
        NewTopic("ck-configs", num_partitions=1, config={"retention.ms": "3600000"}),
        NewTopic("ck-assigned", num_partitions=2, replica_assignment=[[1], [1]]),
    ]
    _settle("create", lambda: wait(admin.create_topics(topics)))
    _settle(
        "create validate-only",
        lambda: wait(admin.create_topics([NewTopic("ck-validate", 1, 1)], validate_only=True)),
    )
    _settle(
        "create partitions", lambda: wait(admin.create_partitions([NewPartitions("ck-plain", 4)]))
    )
    legacy = ConfigResource("topic", "ck-plain", set_config={"retention.ms": "7200000"})
    _settle("alter configs (legacy)", lambda: wait(admin.alter_configs([legacy])))
    incremental = [
        ConfigResource(
            "topic",
            "ck-configs",
            incremental_configs=[
                ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET),
                ConfigEntry("cleanup.policy", None, incremental_operation=AlterConfigOpType.DELETE),
            ],
        ),
        ConfigResource(
            "broker",
            "1",
            incremental_configs=[
                ConfigEntry("log.cleaner.threads", "1", incremental_operation=AlterConfigOpType.SET)
            ],
        ),
    ]
    _settle("incremental alter configs", lambda: wait(admin.incremental_alter_configs(incremental)))
    _settle(
        "delete records",
        lambda: wait(admin.delete_records([TopicPartition("ck-plain", 0, 0)])),
    )
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "golden-confluent"})
    producer.produce("ck-auto-created", b"x")
    producer.flush(10)
    _settle("delete", lambda: wait(admin.delete_topics(["ck-configs", "ck-assigned", "ck-plain"])))


def _kafka_python(bootstrap: str) -> None:
    from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType

    print("kafka-python")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="golden-kafka-python")
    try:
        topics = {
            "kp-plain": {"num_partitions": 3, "replication_factor": 1},
            "kp-configs": {"num_partitions": 1, "configs": {"retention.ms": "3600000"}},
            "kp-assigned": {"assignments": {0: [1], 1: [1]}},
        }
        _settle("create", lambda: admin.create_topics(topics))
        _settle(
            "create validate-only",
            lambda: admin.create_topics({"kp-validate": {"num_partitions": 1}}, validate_only=True),
        )
        _settle(
            "create partitions",
            lambda: admin.create_partitions(
                {"kp-plain": 4, "kp-assigned": {"count": 3, "assignments": [[1]]}}
            ),
        )
        legacy = ConfigResource(
            ConfigResourceType.TOPIC, "kp-plain", configs={"retention.ms": "7200000"}
        )
        _settle("alter configs (legacy)", lambda: admin.alter_configs([legacy], incremental=False))
        incremental = ConfigResource(
            ConfigResourceType.TOPIC,
            "kp-configs",
            configs={"retention.ms": ("SET", "7200000"), "cleanup.policy": ("APPEND", "compact")},
        )
        _settle(
            "incremental alter configs",
            lambda: admin.alter_configs([incremental], incremental=True),
        )
        _settle(
            "reassign",
            lambda: admin.alter_partition_reassignments({TopicPartition("kp-plain", 0): [1]}),
        )
        _settle(
            "cancel reassignment",
            lambda: admin.alter_partition_reassignments({TopicPartition("kp-plain", 1): None}),
        )
        _settle("delete records", lambda: admin.delete_records({TopicPartition("kp-plain", 0): 0}))
        producer = KafkaProducer(bootstrap_servers=bootstrap, client_id="golden-kafka-python")
        _settle("produce (auto-create)", lambda: producer.send("kp-auto-created", b"x").get(10))
        producer.close()
        _settle("delete", lambda: admin.delete_topics(["kp-configs", "kp-plain"]))
        assigned = admin.describe_topics(["kp-assigned"])[0]["topic_id"]
        _settle("delete by id", lambda: admin.delete_topics([uuid.UUID(str(assigned))]))
    finally:
        admin.close()


def _java(kafka: LocalKafka, bootstrap: str) -> None:
    print("java AdminClient")
    result = subprocess.run(
        ["java", "-cp", kafka.classpath(), str(HERE / "GoldenAdmin.java"), bootstrap],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    print("  " + result.stdout.replace("\n", "\n  ").rstrip())
    if result.returncode != 0:
        print(result.stderr[-2000:])


def _duplicates(port: int) -> None:
    """Duplicate topics straight to the broker: what does Kafka itself answer?"""
    print("duplicates, raw wire")
    timeout = datetime.timedelta(seconds=30)

    def show(what: str, request: Any) -> None:
        client = WireClient("127.0.0.1", port, timeout=DUPLICATE_WAIT)
        try:
            print(f"  {what}: {str(client.request(request))[:600]}")
        except TimeoutError:
            print(f"  {what}: NO ANSWER within {DUPLICATE_WAIT:.0f} s")
        finally:
            client.close()

    ct = request_class(19, 7)
    topic_cls = element_class(ct, "topics")

    def new(name: str) -> Any:
        return build(
            topic_cls, name=name, num_partitions=1, replication_factor=1, assignments=(), configs=()
        )

    show(
        "CreateTopics [dup-a, dup-b, dup-a]",
        ct(topics=(new("dup-a"), new("dup-b"), new("dup-a")), timeout=timeout),
    )
    show("CreateTopics [dup-c]", ct(topics=(new("dup-c"),), timeout=timeout))

    cp = request_class(37, 3)
    cp_topic = element_class(cp, "topics")
    topics = (
        build(cp_topic, name="dup-b", count=2, assignments=None),
        build(cp_topic, name="dup-b", count=3, assignments=None),
    )
    show(
        "CreatePartitions [dup-b, dup-b]",
        cp(topics=topics, timeout=timeout, validate_only=False),
    )

    for key, version in ((33, 2), (44, 1)):
        cls = request_class(key, version)
        resource_cls = element_class(cls, "resources")
        config_cls = element_class(resource_cls, "configs")
        config = build(config_cls, name="retention.ms", value="7200000", config_operation=0)
        resources = tuple(
            build(resource_cls, resource_type=2, resource_name=name, configs=(config,))
            for name in ("dup-b", "dup-c", "dup-b")
        )
        show(
            f"{cls.__name__} [dup-b, dup-c, dup-b]",
            cls(resources=resources, validate_only=False),
        )

    apr = request_class(45, 0)
    apr_topic = element_class(apr, "topics")
    apr_partition = element_class(apr_topic, "partitions")
    entry = build(
        apr_topic,
        name="dup-b",
        partitions=(build(apr_partition, partition_index=0, replicas=(1,)),),
    )
    show(
        "AlterPartitionReassignments [dup-b, dup-b]",
        apr(topics=(entry, entry), timeout=timeout),
    )

    dr = request_class(21, 2)
    dr_topic = element_class(dr, "topics")
    dr_partition = element_class(dr_topic, "partitions")
    topics = tuple(
        build(
            dr_topic, name="dup-b", partitions=(build(dr_partition, partition_index=p, offset=0),)
        )
        for p in (0, 1)
    )
    show("DeleteRecords [dup-b p0, dup-b p1]", dr(topics=topics, timeout=timeout))

    dt = request_class(20, 6)
    state = element_class(dt, "topics")
    by_name = build(state, name="dup-b", topic_id=None)
    show(
        "DeleteTopics v6 [dup-b, dup-b]",
        dt(topics=(by_name, by_name), timeout=timeout),
    )
    dt4 = request_class(20, 4)
    show(
        "DeleteTopics v4 [dup-c, dup-c, dup-a]",
        dt4(topic_names=("dup-c", "dup-c", "dup-a"), timeout=timeout),
    )


def _write(captures: list[Capture]) -> None:
    OUT.mkdir(exist_ok=True)
    for stale in OUT.glob("*/*.bin"):
        stale.unlink()
    manifest = []
    counters: dict[str, int] = {}
    for capture in captures:
        number = counters[capture.client] = counters.get(capture.client, 0) + 1
        stem = f"{number:03d}-key{capture.api_key}-v{capture.api_version}"
        folder = OUT / capture.client
        folder.mkdir(exist_ok=True)
        (folder / f"{stem}.request.bin").write_bytes(capture.request)
        entry: dict[str, Any] = {
            "client": capture.client,
            "api_key": capture.api_key,
            "api_version": capture.api_version,
            "request": f"{capture.client}/{stem}.request.bin",
        }
        if capture.response is not None:
            (folder / f"{stem}.response.bin").write_bytes(capture.response)
            entry["response"] = f"{capture.client}/{stem}.response.bin"
        manifest.append(entry)
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"wrote {len(manifest)} exchanges to {OUT}")


def main() -> int:
    """Start the broker and the relay, drive every client, write the frames, stop the broker."""
    recorder = Recorder()
    with tempfile.TemporaryDirectory(prefix="golden-kafka-") as directory:
        kafka = LocalKafka(
            Path(directory), brokers=1, port_base=PORT_BASE, advertise_ports={1: RELAY_PORT}
        )
        listener = socket.create_server(("127.0.0.1", RELAY_PORT))
        try:
            kafka.up()
            broker_port = kafka.broker_addresses[1][1]
            threading.Thread(
                target=serve, args=(listener, broker_port, recorder, CLIENTS), daemon=True
            ).start()
            relay = f"127.0.0.1:{RELAY_PORT}"
            _confluent(relay)
            _kafka_python(relay)
            _java(kafka, relay)
            _duplicates(RELAY_PORT)
            time.sleep(1)
            for log in kafka.log_files():
                errors = [line for line in log.read_text().splitlines() if "ERROR" in line]
                print(f"{log.name}: {len(errors)} ERROR lines", *errors[-5:], sep="\n  ")
        finally:
            listener.close()
            kafka.down()
            _write(
                [c for c in recorder.captures if c.response is not None or c.api_key != METADATA]
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
