"""What the admin clients take and return: topics, config changes, per-topic outcomes."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

CLIENT_NAMES = ("java", "confluent", "kafka-python")
PYTHON_TIMEOUT = 60.0


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
