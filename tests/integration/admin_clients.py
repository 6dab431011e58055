"""One interface over three real admin clients, so that a test can run each guarded API with each.

`JavaAdmin` drives the Java AdminClient (tests/integration/java/AdminOps.java, one JVM),
`ConfluentAdmin` confluent-kafka (librdkafka) and `KafkaPythonAdmin` kafka-python. Every batch
call returns one `TopicOutcome` per topic, in request order, with the error normalized to Kafka's
own error name (`POLICY_VIOLATION`, `TOPIC_ALREADY_EXISTS`, ...) and the client's text in
`message`. `BrokerView` reads the cluster straight from a broker, for assertions that must not
go through a proxy.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import queue
import re
import subprocess
import tempfile
import threading
import time
import uuid
import warnings
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kafka.errors
from confluent_kafka import KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)
from kafka import KafkaAdminClient
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType
from kio.schema.errors import ErrorCode

from harness.local_kafka import java_executable

ADMIN_OPS = Path(__file__).resolve().parent / "java" / "AdminOps.java"
CLIENT_NAMES = ("java", "confluent", "kafka-python")
# Above the Java AdminClient's default.api.timeout.ms (60 s), so that its own timeouts win.
JAVA_REPLY_TIMEOUT = 90.0
PYTHON_TIMEOUT = 60.0
# Short-lived JVM: C1 only and the serial collector start about twice as fast.
JAVA_OPTS = ("-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


@dataclass(frozen=True)
class TopicOutcome:
    """The result of one topic in a batch: ok, or a Kafka error name and the client's text."""

    topic: str
    ok: bool
    error: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class NewTopicSpec:
    """A topic to create: counts (None = broker default) or an explicit replica assignment."""

    name: str
    partitions: int | None = None
    replication_factor: int | None = None
    # assignment[i] lists the replica broker ids of partition i.
    assignment: Sequence[Sequence[int]] | None = None
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PartitionIncrease:
    """Grow `topic` to `total` partitions, optionally placing the new ones explicitly."""

    topic: str
    total: int
    assignment: Sequence[Sequence[int]] | None = None


@dataclass(frozen=True)
class ConfigOp:
    """One incremental config change; `op` is SET, DELETE, APPEND or SUBTRACT."""

    name: str
    op: str
    value: str | None = None


@dataclass(frozen=True)
class ConfigValue:
    """A described config: its value and Kafka's source name (e.g. DYNAMIC_TOPIC_CONFIG)."""

    value: str | None
    source: str


@dataclass(frozen=True)
class TopicInfo:
    """A described topic: id, partition -> replica broker ids, and every config."""

    name: str
    topic_id: uuid.UUID
    partitions: dict[int, list[int]]
    configs: dict[str, ConfigValue]

    @property
    def replication_factor(self) -> int:
        """The replica count of partition 0."""
        return len(self.partitions[0])


@dataclass(frozen=True)
class Sasl:
    """SASL_PLAINTEXT credentials; `mechanism` is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512."""

    mechanism: str
    username: str
    password: str


class NotSupportedByClient(Exception):
    """The client library has no API for this operation."""


class AdminHarnessError(RuntimeError):
    """A harness call failed as a whole (bad input, a dead JVM), not per topic."""


def error_name(code: int) -> str:
    """Kafka's name of a protocol error code, as in Java's `Errors` enum."""
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"ERROR_CODE_{code}"


def kafka_uuid(topic_id: uuid.UUID) -> str:
    """A topic id in Kafka's text form (url-safe base64, unpadded)."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def parse_kafka_uuid(text: str) -> uuid.UUID:
    """The inverse of `kafka_uuid`."""
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))


def fold_per_topic(outcomes: Iterable[TopicOutcome]) -> list[TopicOutcome]:
    """Partition-level outcomes as one per topic, in first-seen order; the first failure wins."""
    folded: dict[str, TopicOutcome] = {}
    for outcome in outcomes:
        seen = folded.get(outcome.topic)
        if seen is None or (seen.ok and not outcome.ok):
            folded[outcome.topic] = outcome
    return list(folded.values())


class AdminHarness(ABC):
    """The admin operations the policy tests run, the same for every client."""

    name: str

    @abstractmethod
    def create_topics(
        self, topics: Sequence[NewTopicSpec], validate_only: bool = False
    ) -> list[TopicOutcome]:
        """CreateTopics."""

    @abstractmethod
    def create_partitions(
        self, increases: Sequence[PartitionIncrease], validate_only: bool = False
    ) -> list[TopicOutcome]:
        """CreatePartitions."""

    @abstractmethod
    def incremental_alter_configs(
        self, changes: Mapping[str, Sequence[ConfigOp]], validate_only: bool = False
    ) -> list[TopicOutcome]:
        """IncrementalAlterConfigs on topics (topic -> its changes)."""

    def alter_configs(
        self, configs: Mapping[str, Mapping[str, str]], validate_only: bool = False
    ) -> list[TopicOutcome]:
        """Legacy AlterConfigs: replaces each topic's dynamic configs (topic -> configs)."""
        raise NotSupportedByClient(f"{self.name} has no legacy AlterConfigs")

    def alter_partition_reassignments(
        self, reassignments: Mapping[tuple[str, int], Sequence[int] | None]
    ) -> list[TopicOutcome]:
        """AlterPartitionReassignments: (topic, partition) -> new replicas, or None to cancel."""
        raise NotSupportedByClient(f"{self.name} has no AlterPartitionReassignments")

    @abstractmethod
    def delete_topics(self, names: Sequence[str]) -> list[TopicOutcome]:
        """DeleteTopics by name."""

    def delete_topics_by_id(self, ids: Sequence[uuid.UUID]) -> list[TopicOutcome]:
        """DeleteTopics by topic id; each outcome's `topic` is `str(id)`."""
        raise NotSupportedByClient(f"{self.name} cannot delete topics by id")

    @abstractmethod
    def delete_records(self, offsets: Mapping[tuple[str, int], int]) -> list[TopicOutcome]:
        """DeleteRecords: (topic, partition) -> delete everything before this offset."""

    @abstractmethod
    def describe_topics(self, names: Sequence[str]) -> dict[str, TopicInfo]:
        """The named topics that exist, described (missing ones are left out)."""

    def topic_id(self, name: str) -> uuid.UUID | None:
        """The id of topic `name`, or None if it does not exist."""
        info = self.describe_topics([name]).get(name)
        return None if info is None else info.topic_id

    @abstractmethod
    def close(self) -> None:
        """Release the client; safe to call twice."""

    def supports(self, operation: str) -> bool:
        """Whether this client implements `operation` (a method name of this class)."""
        return getattr(type(self), operation) is not getattr(AdminHarness, operation)

    def __enter__(self) -> AdminHarness:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class JavaAdmin(AdminHarness):
    """The Java AdminClient, through one long-lived AdminOps.java process."""

    name = "java"

    def __init__(
        self,
        bootstrap: str,
        classpath: str,
        properties: Mapping[str, str] | None = None,
    ) -> None:
        java = java_executable()
        # Lives as long as the JVM; close() closes it.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115
        self._process = subprocess.Popen(
            [java, *JAVA_OPTS, "-cp", classpath, str(ADMIN_OPS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            encoding="utf-8",
        )
        self._replies: queue.Queue[str | None] = queue.Queue()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        threading.Thread(target=self._read_replies, daemon=True).start()
        try:
            self._call("configure", bootstrap=bootstrap, properties=dict(properties or {}))
        except BaseException:
            self.close()
            raise

    def _read_replies(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self._replies.put(line)
        self._replies.put(None)

    def _stderr_tail(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-2000:]

    def _call(self, op: str, **fields: Any) -> list[dict[str, Any]]:
        with self._lock:
            request_id = next(self._ids)
            stdin = self._process.stdin
            if stdin is None or self._process.poll() is not None:
                raise AdminHarnessError(f"AdminOps is not running:\n{self._stderr_tail()}")
            stdin.write(json.dumps({"id": request_id, "op": op, **fields}) + "\n")
            stdin.flush()
            deadline = time.monotonic() + JAVA_REPLY_TIMEOUT
            while True:
                try:
                    line = self._replies.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    raise AdminHarnessError(
                        f"AdminOps gave no answer to {op} within {JAVA_REPLY_TIMEOUT:.0f} s"
                    ) from None
                if line is None:
                    raise AdminHarnessError(f"AdminOps exited during {op}:\n{self._stderr_tail()}")
                reply = json.loads(line)
                # A reply to an earlier call that timed out is skipped.
                if reply.get("id") == request_id:
                    break
        if not reply["ok"]:
            raise AdminHarnessError(f"{op}: {reply['error']}: {reply['message']}")
        results: list[dict[str, Any]] = reply["results"]
        return results

    @staticmethod
    def _outcomes(results: list[dict[str, Any]]) -> list[TopicOutcome]:
        return [
            TopicOutcome(r["topic"], True)
            if r["ok"]
            else TopicOutcome(r["topic"], False, r.get("kafka_error") or r["error"], r["message"])
            for r in results
        ]

    def create_topics(
        self, topics: Sequence[NewTopicSpec], validate_only: bool = False
    ) -> list[TopicOutcome]:
        """CreateTopics."""
        specs = [
            {
                "name": t.name,
                "partitions": t.partitions,
                "replication_factor": t.replication_factor,
                "assignment": None
                if t.assignment is None
                else {str(p): list(replicas) for p, replicas in enumerate(t.assignment)},
                "configs": dict(t.configs),
            }
            for t in topics
        ]
        return self._outcomes(
            self._call("create_topics", topics=specs, validate_only=validate_only)
        )

    def create_partitions(
        self, increases: Sequence[PartitionIncrease], validate_only: bool = False
    ) -> list[TopicOutcome]:
        """CreatePartitions."""
        specs = [
            {
                "name": i.topic,
                "total": i.total,
                "assignment": None if i.assignment is None else [list(r) for r in i.assignment],
            }
            for i in increases
        ]
        return self._outcomes(
            self._call("create_partitions", topics=specs, validate_only=validate_only)
        )

    def incremental_alter_configs(
        self, changes: Mapping[str, Sequence[ConfigOp]], validate_only: bool = False
    ) -> list[TopicOutcome]:
        """IncrementalAlterConfigs on topics (topic -> its changes)."""
        resources = [
            {"topic": topic, "ops": [{"name": o.name, "op": o.op, "value": o.value} for o in ops]}
            for topic, ops in changes.items()
        ]
        return self._outcomes(
            self._call(
                "incremental_alter_configs", resources=resources, validate_only=validate_only
            )
        )

    def alter_partition_reassignments(
        self, reassignments: Mapping[tuple[str, int], Sequence[int] | None]
    ) -> list[TopicOutcome]:
        """AlterPartitionReassignments: (topic, partition) -> new replicas, or None to cancel."""
        partitions = [
            {"topic": t, "partition": p, "replicas": None if r is None else list(r)}
            for (t, p), r in reassignments.items()
        ]
        return self._outcomes(self._call("alter_partition_reassignments", partitions=partitions))

    def delete_topics(self, names: Sequence[str]) -> list[TopicOutcome]:
        """DeleteTopics by name."""
        return self._outcomes(self._call("delete_topics", names=list(names)))

    def delete_topics_by_id(self, ids: Sequence[uuid.UUID]) -> list[TopicOutcome]:
        """DeleteTopics by topic id; each outcome's `topic` is `str(id)`."""
        results = self._call("delete_topics", ids=[kafka_uuid(i) for i in ids])
        for result in results:
            result["topic"] = str(parse_kafka_uuid(result["topic"]))
        return self._outcomes(results)

    def delete_records(self, offsets: Mapping[tuple[str, int], int]) -> list[TopicOutcome]:
        """DeleteRecords: (topic, partition) -> delete everything before this offset."""
        partitions = [{"topic": t, "partition": p, "offset": o} for (t, p), o in offsets.items()]
        return self._outcomes(self._call("delete_records", partitions=partitions))

    def describe_topics(self, names: Sequence[str]) -> dict[str, TopicInfo]:
        """The named topics that exist, described (missing ones are left out)."""
        described: dict[str, TopicInfo] = {}
        for r in self._call("describe_topics", names=list(names)):
            if r["ok"]:
                described[r["topic"]] = TopicInfo(
                    r["topic"],
                    parse_kafka_uuid(r["topic_id"]),
                    {int(p): replicas for p, replicas in r["partitions"].items()},
                    {k: ConfigValue(v["value"], v["source"]) for k, v in r["configs"].items()},
                )
            elif r.get("kafka_error") != "UNKNOWN_TOPIC_OR_PARTITION":
                raise AdminHarnessError(f"describe {r['topic']}: {r['error']}: {r['message']}")
        return described

    def topic_id(self, name: str) -> uuid.UUID | None:
        """The id of topic `name`, or None if it does not exist."""
        (result,) = self._call("topic_id", name=name)
        if result["ok"]:
            return parse_kafka_uuid(result["topic_id"])
        if result.get("kafka_error") == "UNKNOWN_TOPIC_OR_PARTITION":
            return None
        raise AdminHarnessError(f"topic_id {name}: {result['error']}: {result['message']}")

    def close(self) -> None:
        """Stop the JVM (closing stdin ends its loop); safe to call twice."""
        if self._process.stdin is not None and not self._process.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self._process.stdin.close()
        try:
            self._process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        if self._process.stdout is not None:
            self._process.stdout.close()
        self._stderr.close()


def _confluent_outcome(topic: str, future: Future[Any]) -> TopicOutcome:
    try:
        future.result(timeout=PYTHON_TIMEOUT)
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        # librdkafka's own names differ (UNKNOWN_TOPIC_OR_PART); local errors (< -1) keep theirs.
        name = error_name(error.code()) if error.code() >= -1 else error.name()
        return TopicOutcome(topic, False, name, error.str())
    return TopicOutcome(topic, True)


def _confluent_uuid(topic_id: Any) -> uuid.UUID:
    mask = (1 << 64) - 1
    high = topic_id.get_most_significant_bits() & mask
    return uuid.UUID(int=(high << 64) | (topic_id.get_least_significant_bits() & mask))


def _confluent_found(name: str, future: Future[Any]) -> Any:
    """The future's result, or None if the answering broker does not know the topic (yet)."""
    outcome = _confluent_outcome(name, future)
    if outcome.ok:
        return future.result()
    if outcome.error != "UNKNOWN_TOPIC_OR_PARTITION":
        raise AdminHarnessError(f"describe {name}: {outcome.error}: {outcome.message}")
    return None


def _confluent_describe(client: AdminClient, names: Sequence[str]) -> dict[str, TopicInfo]:
    if not names:
        return {}
    futures = client.describe_topics(TopicCollection(list(names)))
    described = {name: _confluent_found(name, future) for name, future in futures.items()}
    resources = [ConfigResource(ResourceType.TOPIC, name) for name, d in described.items() if d]
    if not resources:
        return {}
    # Another broker may answer this; one that does not know a new topic yet leaves it out.
    configs = {
        resource.name: _confluent_found(resource.name, future)
        for resource, future in client.describe_configs(resources).items()
    }
    return {
        name: TopicInfo(
            name,
            _confluent_uuid(d.topic_id),
            {p.id: [node.id for node in p.replicas] for p in d.partitions},
            {
                k: ConfigValue(e.value, ConfigSource(e.source).name)
                for k, e in configs[name].items()
            },
        )
        for name, d in described.items()
        if d and configs[name]
    }


def _confluent_config(bootstrap: str, config: Mapping[str, Any] | None) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "client.id": "admin-harness", **(config or {})}


class ConfluentAdmin(AdminHarness):
    """confluent-kafka's AdminClient (librdkafka)."""

    name = "confluent"

    def __init__(self, bootstrap: str, config: Mapping[str, Any] | None = None) -> None:
        self._client = AdminClient(_confluent_config(bootstrap, config))

    def create_topics(
        self, topics: Sequence[NewTopicSpec], validate_only: bool = False
    ) -> list[TopicOutcome]:
        """CreateTopics."""
        new = []
        for t in topics:
            # librdkafka wants the partition count and no replication factor (even -1) next to
            # an assignment.
            if t.assignment is not None:
                assignment = [list(r) for r in t.assignment]
                topic = NewTopic(t.name, len(assignment), replica_assignment=assignment)
            else:
                topic = NewTopic(
                    t.name,
                    -1 if t.partitions is None else t.partitions,
                    -1 if t.replication_factor is None else t.replication_factor,
                )
            topic.config = dict(t.configs)
            new.append(topic)
        futures = self._client.create_topics(new, validate_only=validate_only)
        return [_confluent_outcome(t.name, futures[t.name]) for t in topics]

    def create_partitions(
        self, increases: Sequence[PartitionIncrease], validate_only: bool = False
    ) -> list[TopicOutcome]:
        """CreatePartitions."""
        new = [
            NewPartitions(i.topic, i.total)
            if i.assignment is None
            else NewPartitions(i.topic, i.total, replica_assignment=[list(r) for r in i.assignment])
            for i in increases
        ]
        futures = self._client.create_partitions(new, validate_only=validate_only)
        return [_confluent_outcome(i.topic, futures[i.topic]) for i in increases]

    def incremental_alter_configs(
        self, changes: Mapping[str, Sequence[ConfigOp]], validate_only: bool = False
    ) -> list[TopicOutcome]:
        """IncrementalAlterConfigs on topics (topic -> its changes)."""
        resources = [
            ConfigResource(
                ResourceType.TOPIC,
                topic,
                incremental_configs=[
                    ConfigEntry(o.name, o.value, incremental_operation=AlterConfigOpType[o.op])
                    for o in ops
                ],
            )
            for topic, ops in changes.items()
        ]
        futures = self._client.incremental_alter_configs(resources, validate_only=validate_only)
        return [_confluent_outcome(r.name, futures[r]) for r in resources]

    def alter_configs(
        self, configs: Mapping[str, Mapping[str, str]], validate_only: bool = False
    ) -> list[TopicOutcome]:
        """Legacy AlterConfigs: replaces each topic's dynamic configs (topic -> configs)."""
        resources = [
            ConfigResource(ResourceType.TOPIC, topic, set_config=dict(values))
            for topic, values in configs.items()
        ]
        with warnings.catch_warnings():
            # Deprecated in confluent-kafka, and exactly what this method is for.
            warnings.simplefilter("ignore", DeprecationWarning)
            futures = self._client.alter_configs(resources, validate_only=validate_only)
        return [_confluent_outcome(r.name, futures[r]) for r in resources]

    def delete_topics(self, names: Sequence[str]) -> list[TopicOutcome]:
        """DeleteTopics by name."""
        futures = self._client.delete_topics(list(names))
        return [_confluent_outcome(name, futures[name]) for name in names]

    def delete_records(self, offsets: Mapping[tuple[str, int], int]) -> list[TopicOutcome]:
        """DeleteRecords: (topic, partition) -> delete everything before this offset."""
        partitions = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
        futures = self._client.delete_records(partitions)
        return fold_per_topic(_confluent_outcome(tp.topic, futures[tp]) for tp in partitions)

    def describe_topics(self, names: Sequence[str]) -> dict[str, TopicInfo]:
        """The named topics that exist, described (missing ones are left out)."""
        return _confluent_describe(self._client, names)

    def close(self) -> None:
        """Nothing to release: librdkafka's admin handle goes with the object."""


# kafka-python's DeleteRecords errors name the failed partitions only in the exception text.
_KP_ONE_PARTITION = re.compile(r"Error deleting records from topic (\S+) partition (\d+)")
_KP_PARTITIONS = re.compile(r"([\w.-]+)\(partition=(\d+)\): (\w+)")
# str() of kafka-python's broker errors: "[Error 44] PolicyViolationError: <message>".
_KP_ERROR_TEXT = re.compile(r"\[Error (-?\d+)\] \w+(?:: (.*))?", re.DOTALL)


def _kp_error_name(error: type[kafka.errors.KafkaError] | kafka.errors.KafkaError) -> str:
    errno = getattr(error, "errno", None)
    if isinstance(errno, int):
        return error_name(errno)
    # Client-side errors (timeouts, connection failures) have no Kafka code.
    return error.__name__ if isinstance(error, type) else type(error).__name__


def _kp_outcome(topic: str, code: int, message: str | None) -> TopicOutcome:
    return (
        TopicOutcome(topic, True)
        if code == 0
        else TopicOutcome(topic, False, error_name(code), message)
    )


class KafkaPythonAdmin(AdminHarness):
    """kafka-python's KafkaAdminClient."""

    name = "kafka-python"

    def __init__(self, bootstrap: str, **config: Any) -> None:
        self._client: Any = KafkaAdminClient(
            bootstrap_servers=bootstrap, client_id="admin-harness", **config
        )
        self._closed = False

    def create_topics(
        self, topics: Sequence[NewTopicSpec], validate_only: bool = False
    ) -> list[TopicOutcome]:
        """CreateTopics."""
        specs: dict[str, dict[str, Any]] = {}
        for t in topics:
            spec: dict[str, Any] = {"configs": dict(t.configs)}
            if t.assignment is not None:
                spec["assignments"] = {p: list(r) for p, r in enumerate(t.assignment)}
            if t.partitions is not None:
                spec["num_partitions"] = t.partitions
            if t.replication_factor is not None:
                spec["replication_factor"] = t.replication_factor
            specs[t.name] = spec
        response = self._client.create_topics(
            specs, validate_only=validate_only, raise_errors=False
        )
        by_name = {r["name"]: r for r in response["topics"]}
        return [
            _kp_outcome(t.name, by_name[t.name]["error_code"], by_name[t.name]["error_message"])
            for t in topics
        ]

    def create_partitions(
        self, increases: Sequence[PartitionIncrease], validate_only: bool = False
    ) -> list[TopicOutcome]:
        """CreatePartitions."""
        specs: dict[str, Any] = {
            i.topic: i.total
            if i.assignment is None
            else {"count": i.total, "assignments": [list(r) for r in i.assignment]}
            for i in increases
        }
        response = self._client.create_partitions(
            specs, validate_only=validate_only, raise_errors=False
        )
        by_name = {r.name: r for r in response.results}
        return [
            _kp_outcome(i.topic, by_name[i.topic].error_code, by_name[i.topic].error_message)
            for i in increases
        ]

    def _alter(
        self, resources: list[Any], validate_only: bool, incremental: bool
    ) -> list[TopicOutcome]:
        # raise_on_unknown would first describe each topic and fail the batch client-side.
        results = self._client.alter_configs(
            resources, validate_only=validate_only, raise_on_unknown=False, incremental=incremental
        ).get("topic", {})
        outcomes = []
        for resource in resources:
            text = results[resource.name]
            match = _KP_ERROR_TEXT.fullmatch(text)
            if text == "OK":
                outcomes.append(TopicOutcome(resource.name, True))
                continue
            if match is None:
                outcomes.append(TopicOutcome(resource.name, False, None, text))
                continue
            message = match.group(2)
            outcomes.append(
                _kp_outcome(
                    resource.name, int(match.group(1)), None if message == "None" else message
                )
            )
        return outcomes

    def incremental_alter_configs(
        self, changes: Mapping[str, Sequence[ConfigOp]], validate_only: bool = False
    ) -> list[TopicOutcome]:
        """IncrementalAlterConfigs on topics (topic -> its changes)."""
        resources = [
            KpConfigResource(
                ConfigResourceType.TOPIC, topic, configs={o.name: (o.op, o.value) for o in ops}
            )
            for topic, ops in changes.items()
        ]
        return self._alter(resources, validate_only, incremental=True)

    def alter_configs(
        self, configs: Mapping[str, Mapping[str, str]], validate_only: bool = False
    ) -> list[TopicOutcome]:
        """Legacy AlterConfigs: replaces each topic's dynamic configs (topic -> configs)."""
        resources = [
            KpConfigResource(ConfigResourceType.TOPIC, topic, configs=dict(values))
            for topic, values in configs.items()
        ]
        return self._alter(resources, validate_only, incremental=False)

    def alter_partition_reassignments(
        self, reassignments: Mapping[tuple[str, int], Sequence[int] | None]
    ) -> list[TopicOutcome]:
        """AlterPartitionReassignments: (topic, partition) -> new replicas, or None to cancel."""
        request = {
            KpTopicPartition(t, p): None if r is None else list(r)
            for (t, p), r in reassignments.items()
        }
        topics = [t for t, _ in reassignments]
        try:
            errors = self._client.alter_partition_reassignments(request)
        except kafka.errors.KafkaError as exc:
            # A top-level error fails every partition.
            return fold_per_topic(
                TopicOutcome(t, False, _kp_error_name(exc), str(exc)) for t in topics
            )
        outcomes = []
        for tp in request:
            # Partitions the broker left out of its answer count as failed.
            error = errors.get(tp, kafka.errors.UnknownError)
            # kafka-python keeps the per-partition error class, not the broker's message.
            outcomes.append(
                TopicOutcome(tp.topic, False, _kp_error_name(error), None)
                if error is not None
                else TopicOutcome(tp.topic, True)
            )
        return fold_per_topic(outcomes)

    def _delete(self, topics: list[Any]) -> list[dict[str, Any]]:
        response = self._client.delete_topics(topics, raise_errors=False)
        results: list[dict[str, Any]] = response["topics"]
        return results

    def delete_topics(self, names: Sequence[str]) -> list[TopicOutcome]:
        """DeleteTopics by name."""
        by_name = {r["name"]: r for r in self._delete(list(names))}
        return [
            _kp_outcome(n, by_name[n]["error_code"], by_name[n].get("error_message")) for n in names
        ]

    def delete_topics_by_id(self, ids: Sequence[uuid.UUID]) -> list[TopicOutcome]:
        """DeleteTopics by topic id; each outcome's `topic` is `str(id)`."""
        by_id = {uuid.UUID(str(r["topic_id"])): r for r in self._delete(list(ids))}
        return [
            _kp_outcome(str(i), by_id[i]["error_code"], by_id[i].get("error_message")) for i in ids
        ]

    def delete_records(self, offsets: Mapping[tuple[str, int], int]) -> list[TopicOutcome]:
        """DeleteRecords: (topic, partition) -> delete everything before this offset."""
        topics = [t for t, _ in offsets]
        try:
            self._client.delete_records(
                {KpTopicPartition(t, p): o for (t, p), o in offsets.items()}
            )
        except kafka.errors.KafkaError as exc:
            text = str(exc)
            failed: dict[str, TopicOutcome] = {}
            one = _KP_ONE_PARTITION.search(text)
            if one is not None:
                failed[one.group(1)] = TopicOutcome(one.group(1), False, _kp_error_name(exc), text)
            for topic, _partition, class_name in _KP_PARTITIONS.findall(text):
                error = getattr(kafka.errors, class_name, kafka.errors.UnknownError)
                failed.setdefault(topic, TopicOutcome(topic, False, _kp_error_name(error), text))
            if not failed:
                # Not per partition (e.g. an unknown topic in the leader lookup): all failed.
                failed = {t: TopicOutcome(t, False, _kp_error_name(exc), text) for t in topics}
            return fold_per_topic(failed.get(t, TopicOutcome(t, True)) for t in topics)
        return fold_per_topic(TopicOutcome(t, True) for t in topics)

    def describe_topics(self, names: Sequence[str]) -> dict[str, TopicInfo]:
        """The named topics that exist, described (missing ones are left out)."""
        found = {}
        for topic in self._client.describe_topics(list(names)):
            code = topic["error_code"]
            if code == 0:
                found[topic["name"]] = topic
            elif error_name(code) != "UNKNOWN_TOPIC_OR_PARTITION":
                raise AdminHarnessError(f"describe {topic['name']}: {error_name(code)}")
        if not found:
            return {}
        resources = [KpConfigResource(ConfigResourceType.TOPIC, name) for name in found]
        configs = self._client.describe_configs(resources, config_filter="all").get("topic", {})
        return {
            name: TopicInfo(
                name,
                uuid.UUID(str(topic["topic_id"])),
                {
                    p["partition_index"]: list(p["replica_nodes"])
                    for p in sorted(topic["partitions"], key=lambda p: p["partition_index"])
                },
                {k: ConfigValue(v["value"], v["config_source"]) for k, v in configs[name].items()},
            )
            for name, topic in found.items()
            # A broker that does not know a new topic yet answers no configs for it.
            if configs.get(name)
        }

    def close(self) -> None:
        """Close the client's connections; safe to call twice."""
        if not self._closed:
            self._closed = True
            self._client.close()


def _sasl_settings(sasl: Sasl) -> dict[str, dict[str, Any]]:
    module = "plain.PlainLoginModule" if sasl.mechanism == "PLAIN" else "scram.ScramLoginModule"
    jaas = (
        f"org.apache.kafka.common.security.{module} required "
        f'username="{sasl.username}" password="{sasl.password}";'
    )
    return {
        "java": {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": sasl.mechanism,
            "sasl.jaas.config": jaas,
        },
        "confluent": {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": sasl.mechanism,
            "sasl.username": sasl.username,
            "sasl.password": sasl.password,
        },
        "kafka-python": {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": sasl.mechanism,
            "sasl_plain_username": sasl.username,
            "sasl_plain_password": sasl.password,
        },
    }


def admin_clients(
    bootstrap: str,
    classpath: str,
    extra: Mapping[str, Mapping[str, Any]] | None = None,
    sasl: Sasl | None = None,
) -> dict[str, AdminHarness]:
    """One harness per client, keyed by CLIENT_NAMES; `extra` adds raw settings per client name."""
    settings = _sasl_settings(sasl) if sasl else {name: {} for name in CLIENT_NAMES}
    for name, values in (extra or {}).items():
        settings[name] = {**settings[name], **values}
    clients: dict[str, AdminHarness] = {}
    try:
        clients["java"] = JavaAdmin(bootstrap, classpath, settings["java"])
        clients["confluent"] = ConfluentAdmin(bootstrap, settings["confluent"])
        clients["kafka-python"] = KafkaPythonAdmin(bootstrap, **settings["kafka-python"])
    except BaseException:
        close_all(clients.values())
        raise
    return clients


def close_all(clients: Iterable[AdminHarness]) -> None:
    """Close every client, even if one fails; the first failure is raised afterwards."""
    failures = []
    for client in clients:
        try:
            client.close()
        except Exception as exc:
            failures.append(exc)
    if failures:
        raise failures[0]


class BrokerView:
    """The cluster as a broker reports it (confluent-kafka against the broker's own address)."""

    def __init__(self, bootstrap: str) -> None:
        self._client = AdminClient(_confluent_config(bootstrap, {"client.id": "broker-view"}))

    def topics(self) -> set[str]:
        """Every topic name, internal ones included."""
        return set(self._client.list_topics(timeout=PYTHON_TIMEOUT).topics)

    def describe(self, topic: str) -> TopicInfo | None:
        """Partitions, replica assignment and configs (with sources) of `topic`, or None."""
        return _confluent_describe(self._client, [topic]).get(topic)

    def low_watermarks(self, topic: str) -> dict[int, int]:
        """Partition -> earliest offset (what DeleteRecords moves)."""
        info = self.describe(topic)
        if info is None:
            raise AdminHarnessError(f"topic {topic!r} does not exist")
        request = {TopicPartition(topic, p): OffsetSpec.earliest() for p in info.partitions}
        deadline = time.monotonic() + PYTHON_TIMEOUT
        while True:
            futures = self._client.list_offsets(request)
            try:
                return {
                    tp.partition: f.result(timeout=PYTHON_TIMEOUT).offset
                    for tp, f in futures.items()
                }
            except KafkaException as exc:
                # Leadership moves (reassignments) leave librdkafka's metadata stale a moment.
                if not exc.args[0].retriable() or time.monotonic() > deadline:
                    raise
            time.sleep(0.2)
