"""`kafka-policy-proxy snapshot` against the real cluster, checked against Kafka's own clients.

Other tests share the cluster, so only this module's topics (and __consumer_offsets) are
compared field by field; the topic list as a whole is compared with kafka-python's.
"""

from __future__ import annotations

import asyncio
import io
import json
import math
import re
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient

from kafka_policy_proxy.policy.model import ConfigMap, TopicState, freeze_assignment
from kafka_policy_proxy.proxy.cluster.broker_defaults import CREATE_DEFAULTS
from kafka_policy_proxy.proxy.cluster.client import KafkaClient
from kafka_policy_proxy.proxy.cluster.snapshot import write_snapshot
from tests.integration.admin_clients import JavaAdmin, NewTopicSpec, TopicInfo

pytestmark = pytest.mark.integration

CLI = Path(sys.executable).parent / "kafka-policy-proxy"
PREFIX = f"snap-{uuid.uuid4().hex[:8]}"
SPECS = (
    NewTopicSpec(
        f"{PREFIX}-compact",
        3,
        2,
        configs={
            "cleanup.policy": "compact",
            "retention.ms": "3600000",
            "min.insync.replicas": "2",
        },
    ),
    NewTopicSpec(f"{PREFIX}-plain", 1, 3),
    NewTopicSpec(f"{PREFIX}-wide", 7, 1, configs={"max.message.bytes": "2000000"}),
)
NAMES = [spec.name for spec in SPECS]
# Differs between two snapshots of an unchanged cluster: KRaft brokers name a random one.
VOLATILE = ("taken_at", "controller_id")


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`kafka-policy-proxy snapshot ARGS` as users run it."""
    return subprocess.run(
        [str(CLI), "snapshot", *args], capture_output=True, text=True, timeout=120, check=False
    )


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The snapshot file's lines, each checked to be compact JSON."""
    raw = path.read_text().splitlines()
    lines = [json.loads(line) for line in raw]
    assert raw == [json.dumps(line, separators=(",", ":")) for line in lines]
    return lines


def topic_lines(lines: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Topic name -> its line."""
    return {line["name"]: line for line in lines if line["kind"] == "topic"}


def stable(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lines without the fields that differ between two snapshots of the same cluster."""
    return [{k: v for k, v in line.items() if k not in VOLATILE} for line in lines]


@pytest.fixture(scope="module")
def java(kafka: Any) -> Iterator[JavaAdmin]:
    """The Java AdminClient, straight at the brokers."""
    client = JavaAdmin(kafka.bootstrap_servers, kafka.classpath())
    yield client
    client.close()


@pytest.fixture(scope="module")
def topics(kafka: Any, java: JavaAdmin) -> list[str]:
    """This module's topics, known to the broker the snapshot reads from, and __consumer_offsets."""
    assert all(outcome.ok for outcome in java.create_topics(SPECS)), "cannot create the topics"
    # Looking up a group's coordinator makes the brokers create __consumer_offsets. Only that
    # matters here, not the answer, which comes late (or as an error) while the topic loads.
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    admin.describe_consumer_groups([f"{PREFIX}-group"], request_timeout=30)
    # The snapshot reads from the first bootstrap server, which learns of new topics a moment
    # after the controller.
    first = kafka.bootstrap_servers.split(",")[0]
    deadline = time.monotonic() + 30
    while not {*NAMES, "__consumer_offsets"} <= set(topic_lines(in_process(first))):
        assert time.monotonic() < deadline, "the first broker never saw the topics"
        time.sleep(0.2)
    return NAMES


def in_process(bootstrap: str, **options: Any) -> list[dict[str, Any]]:
    """A snapshot taken by calling write_snapshot (for its internal page and batch sizes)."""
    out = io.StringIO()
    asyncio.run(write_snapshot(bootstrap, out, **options))
    return [json.loads(line) for line in out.getvalue().splitlines()]


@pytest.fixture(scope="module")
def taken(kafka: Any, topics: list[str], tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One snapshot by the CLI, and the time window it was taken in."""
    path = tmp_path_factory.mktemp("snapshot") / "cluster.jsonl"
    before = datetime.now(UTC)
    result = run_cli("--bootstrap-server", kafka.bootstrap_servers, "--out", str(path))
    after = datetime.now(UTC)
    assert result.returncode == 0, result.stderr
    return path, result, before, after


def test_the_file_holds_a_cluster_line_sorted_topics_and_an_end_line(taken: Any) -> None:
    path, result, _, _ = taken
    lines = read_lines(path)
    assert not path.with_name(f"{path.name}.tmp").exists()
    cluster, *middle, end = lines
    assert (cluster["kind"], cluster["schema"], end["kind"]) == ("cluster", 1, "end")
    assert {line["kind"] for line in middle} == {"topic"}
    names = [line["name"] for line in middle]
    assert names == sorted(set(names))
    assert end["topics"] == len(middle)
    assert {line["cluster_id"] for line in lines} == {cluster["cluster_id"]}
    assert result.stderr == f"kafka-policy-proxy snapshot: {len(middle)} topics written to {path}\n"
    assert result.stdout == ""


def test_the_cluster_line_matches_what_the_brokers_report(
    kafka: Any, taken: Any, java: JavaAdmin
) -> None:
    path, _, before, after = taken
    cluster = read_lines(path)[0]
    described = KafkaAdminClient(bootstrap_servers=kafka.bootstrap_servers).describe_cluster()
    assert cluster["cluster_id"] == described["cluster_id"] == kafka.cluster_id
    assert cluster["bootstrap_servers"] == kafka.bootstrap_servers
    assert cluster["brokers"] == [
        {"id": b["broker_id"], "host": b["host"], "port": b["port"], "rack": b["rack"]}
        for b in sorted(described["brokers"], key=lambda b: b["broker_id"])
    ]
    assert cluster["controller_id"] in {b["id"] for b in cluster["brokers"]}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", cluster["taken_at"])
    taken_at = datetime.strptime(cluster["taken_at"], "%Y-%m-%dT%H:%M:%S.%f%z")
    assert before <= taken_at <= after
    # The broker defaults are what a topic without overrides gets, plus the create defaults
    # local_kafka sets.
    defaults = dict(cluster["defaults"])
    assert {defaults.pop(name) for name in CREATE_DEFAULTS} == {"1"}
    plain = java.describe_topics([f"{PREFIX}-plain"])[f"{PREFIX}-plain"]
    assert defaults == {name: config.value for name, config in plain.configs.items()}


def expected_line(cluster_id: str, spec: NewTopicSpec, info: TopicInfo) -> dict[str, Any]:
    """The line the Java AdminClient's view of a topic calls for."""
    return {
        "kind": "topic",
        "cluster_id": cluster_id,
        "name": spec.name,
        "topic_id": str(info.topic_id),
        "partitions": spec.partitions,
        "replication_factor": spec.replication_factor,
        "assignment": [[p, info.partitions[p]] for p in sorted(info.partitions)],
        "configs": {name: config.value for name, config in info.configs.items()},
        "config_sources": {name: config.source for name, config in info.configs.items()},
        "internal": False,
        "marked_for_deletion": False,
    }


def test_topic_lines_match_the_java_admin_client(taken: Any, java: JavaAdmin) -> None:
    path, _, _, _ = taken
    lines = read_lines(path)
    mine = topic_lines(lines)
    described = java.describe_topics(NAMES)
    for spec in SPECS:
        line, info = mine[spec.name], described[spec.name]
        assert line == expected_line(lines[0]["cluster_id"], spec, info)
        assert len(info.partitions) == spec.partitions
        assert all(
            len(replicas) == spec.replication_factor for replicas in info.partitions.values()
        )
        for name, value in spec.configs.items():
            assert (line["configs"][name], line["config_sources"][name]) == (
                value,
                "DYNAMIC_TOPIC_CONFIG",
            )
        assert line["config_sources"]["segment.bytes"] == "DEFAULT_CONFIG"
        # The line is a TopicState as the policy engine reads it.
        assert TopicState.from_dict(line) == TopicState(
            name=spec.name,
            topic_id=str(info.topic_id),
            partitions=spec.partitions or 0,
            replication_factor=spec.replication_factor or 0,
            assignment=freeze_assignment(info.partitions.items()),
            configs=ConfigMap((name, config.value) for name, config in info.configs.items()),
        )


def test_every_topic_and_its_internal_flag_match_kafka_python(kafka: Any, taken: Any) -> None:
    path, _, _, _ = taken
    mine = topic_lines(read_lines(path))
    described = KafkaAdminClient(bootstrap_servers=kafka.bootstrap_servers).describe_topics()
    assert {name: (line["internal"], line["partitions"]) for name, line in mine.items()} == {
        t["name"]: (t["is_internal"], len(t["partitions"])) for t in described
    }
    assert mine["__consumer_offsets"]["internal"] is True


def test_tiny_pages_and_the_metadata_fallback_give_the_same_snapshot(
    kafka: Any, topics: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[Any] = []
    original = KafkaClient.request

    async def recording(self: KafkaClient, message: Any) -> Any:
        sent.append(message)
        return await original(self, message)

    monkeypatch.setattr(KafkaClient, "request", recording)
    whole = in_process(kafka.bootstrap_servers)
    assert Counter(type(m).__name__ for m in sent)["DescribeTopicPartitionsRequest"] == 1
    sent.clear()
    tiny = in_process(kafka.bootstrap_servers, partition_page=2, config_batch=2)
    kinds = Counter(type(m).__name__ for m in sent)
    sent.clear()
    fallback = in_process(kafka.bootstrap_servers, describe_topic_partitions=False, config_batch=2)
    assert stable(tiny) == stable(whole)
    assert stable(fallback) == stable(whole)
    # Really paged: two partitions per page, two topics per DescribeConfigs (plus the broker's).
    partitions = sum(line["partitions"] for line in topic_lines(whole).values())
    assert kinds["DescribeTopicPartitionsRequest"] == math.ceil(partitions / 2)
    assert kinds["DescribeConfigsRequest"] == 1 + math.ceil(whole[-1]["topics"] / 2)
    assert "DescribeTopicPartitionsRequest" not in {type(m).__name__ for m in sent}


def properties_file(path: Path, mechanism: str, password: str) -> Path:
    """A --command-config file in the forms Kafka's tools accept (comments, ':', continuation)."""
    module = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
    path.write_text(
        "# the brokers' SASL listener\n"
        "security.protocol = SASL_PLAINTEXT\n"
        f"sasl.mechanism: {mechanism}\n"
        f"sasl.jaas.config=org.apache.kafka.common.security.{module} required \\\n"
        '    username="admin" \\\n'
        f'    password="{password}";\n'
    )
    return path


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
def test_command_config_authenticates_on_the_sasl_listener(
    kafka: Any, taken: Any, tmp_path: Path, mechanism: str
) -> None:
    config = properties_file(tmp_path / "admin.properties", mechanism, "admin-secret")
    out = tmp_path / "sasl.jsonl"
    result = run_cli(
        "--bootstrap-server",
        kafka.sasl_bootstrap_servers,
        "--command-config",
        str(config),
        "--out",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    lines = read_lines(out)
    plaintext = read_lines(taken[0])
    assert lines[0]["cluster_id"] == plaintext[0]["cluster_id"]
    assert lines[0]["bootstrap_servers"] == kafka.sasl_bootstrap_servers
    # The brokers are named by their addresses on the listener asked (SASL here).
    sasl_ports = {int(s.rsplit(":", 1)[1]) for s in kafka.sasl_bootstrap_servers.split(",")}
    assert {b["port"] for b in lines[0]["brokers"]} == sasl_ports
    mine, before = topic_lines(lines), topic_lines(plaintext)
    assert {name: mine[name] for name in NAMES} == {name: before[name] for name in NAMES}


def test_kafkas_own_tools_accept_the_same_command_config(kafka: Any, tmp_path: Path) -> None:
    config = properties_file(tmp_path / "admin.properties", "SCRAM-SHA-512", "admin-secret")
    command = kafka.tool_command(
        "kafka-topics",
        "--bootstrap-server",
        kafka.sasl_bootstrap_servers.split(",")[0],
        "--command-config",
        str(config),
        "--list",
    )
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert set(NAMES) <= set(result.stdout.split())


def test_a_wrong_password_exits_1_with_one_clear_line(kafka: Any, tmp_path: Path) -> None:
    config = properties_file(tmp_path / "admin.properties", "SCRAM-SHA-512", "not-the-password")
    out = tmp_path / "sasl.jsonl"
    result = run_cli(
        "--bootstrap-server",
        kafka.sasl_bootstrap_servers,
        "--command-config",
        str(config),
        "--out",
        str(out),
        "--timeout",
        "10",
    )
    assert result.returncode == 1
    assert result.stderr.startswith("kafka-policy-proxy snapshot: cannot read the broker list ")
    assert "SASL authentication failed" in result.stderr
    assert "invalid credentials" in result.stderr
    assert result.stderr.count("\n") == 1
    assert list(tmp_path.iterdir()) == [config]


def test_an_unsupported_command_config_exits_2(kafka: Any, tmp_path: Path) -> None:
    config = tmp_path / "kerberos.properties"
    config.write_text("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n")
    result = run_cli(
        "--bootstrap-server",
        kafka.bootstrap_servers,
        "--command-config",
        str(config),
        "--out",
        str(tmp_path / "s.jsonl"),
    )
    assert result.returncode == 2
    assert result.stderr == (
        f"kafka-policy-proxy snapshot: {config}: sasl.mechanism: GSSAPI is not supported; use "
        "one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER\n"
    )
    assert list(tmp_path.iterdir()) == [config]


def test_a_dynamic_cluster_default_shows_in_defaults_and_sources(
    kafka: Any, topics: list[str], java: JavaAdmin, tmp_path: Path
) -> None:
    """Last in the module: it changes a cluster-wide default (and puts it back)."""

    def configs(*change: str) -> None:
        command = kafka.tool_command(
            "kafka-configs",
            "--bootstrap-server",
            kafka.bootstrap_servers,
            "--alter",
            "--entity-type",
            "brokers",
            "--entity-default",
            *change,
        )
        subprocess.run(command, capture_output=True, timeout=120, check=True)

    configs("--add-config", "log.cleaner.delete.retention.ms=43200000")
    try:
        out = tmp_path / "s.jsonl"
        deadline = time.monotonic() + 30
        while True:
            result = run_cli("--bootstrap-server", kafka.bootstrap_servers, "--out", str(out))
            assert result.returncode == 0, result.stderr
            lines = read_lines(out)
            if lines[0]["defaults"]["delete.retention.ms"] == "43200000":
                break
            assert time.monotonic() < deadline, "the brokers never applied the new default"
            time.sleep(0.5)
        plain = topic_lines(lines)[f"{PREFIX}-plain"]
        assert plain["configs"]["delete.retention.ms"] == "43200000"
        assert plain["config_sources"]["delete.retention.ms"] == "DYNAMIC_DEFAULT_BROKER_CONFIG"
        info = java.describe_topics([f"{PREFIX}-plain"])[f"{PREFIX}-plain"]
        assert plain["config_sources"] == {name: c.source for name, c in info.configs.items()}
    finally:
        configs("--delete-config", "log.cleaner.delete.retention.ms")
