"""The Kafka Streams internal-topic rule kind (KIP-698): keep state and repartition data safe.

Streams names its internal topics `<application.id>-<name>-changelog` and
`<application.id>-<name>-repartition` (foreign-key joins add `-subscription-registration-topic`
and `-subscription-response-topic`, handled like repartition topics). Deleting one loses
the application's state or unprocessed records, and Streams would silently recreate it empty.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

from kafka_policy_proxy.policy.checks import (
    ALTER_CONFIGS,
    ALTER_PARTITIONS,
    CREATE,
    DELETE,
    DELETE_RECORDS,
    Check,
)
from kafka_policy_proxy.policy.cluster import ClusterState
from kafka_policy_proxy.policy.configs import parse_value, split_list
from kafka_policy_proxy.policy.model import Action, Fact, TopicRequest
from kafka_policy_proxy.policy.rules import StreamsSpec

CHANGELOG = "changelog"
REPARTITION = "repartition"
_SUFFIXES = (
    ("-changelog", CHANGELOG),
    ("-repartition", REPARTITION),
    ("-subscription-registration-topic", REPARTITION),
    ("-subscription-response-topic", REPARTITION),
)

_ANY_SUFFIX = tuple(suffix for suffix, _ in _SUFFIXES)


def _glob(patterns: list[str]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns) or r"(?!)")


@dataclass(frozen=True, slots=True)
class StreamsTopic:
    """A recognised internal topic: its application id and kind."""

    application_id: str
    kind: str


class StreamsMatcher:
    """Recognises an application's internal topics and its owners."""

    def __init__(self, spec: StreamsSpec) -> None:
        self._apps = None if spec.application_ids is None else _glob(spec.application_ids)
        self._owners = [
            (_glob([app]), _glob(principals)) for app, principals in spec.owners.items()
        ]

    def classify(self, name: str) -> StreamsTopic | None:
        """The application id and kind of an internal topic name, or None."""
        if not name.endswith(_ANY_SUFFIX):
            return None
        for suffix, kind in _SUFFIXES:
            if not name.endswith(suffix):
                continue
            stem = name[: -len(suffix)]
            # The application id is the shortest '-'-terminated prefix that is a known id;
            # the store or processor name after it is never empty.
            for cut in (i for i, ch in enumerate(stem) if ch == "-"):
                app = stem[:cut]
                if (
                    app
                    and cut + 1 < len(stem)
                    and (self._apps is None or self._apps.fullmatch(app))
                ):
                    return StreamsTopic(app, kind)
        return None

    def owned(self, app: str) -> bool:
        """Whether any owner is declared for this application."""
        return any(apps.fullmatch(app) for apps, _ in self._owners)

    def is_owner(self, app: str, principal: str) -> bool:
        """Whether the principal owns the application."""
        return any(apps.fullmatch(app) and who.fullmatch(principal) for apps, who in self._owners)


def compile_streams(spec: StreamsSpec) -> list[Check]:
    """Compile the Streams rule into checks for delete, delete_records, partitions and configs."""
    matcher = StreamsMatcher(spec)

    def lifecycle(request: TopicRequest, cluster: ClusterState) -> str | None:
        name = request.name
        topic = matcher.classify(name)
        if topic is None or matcher.is_owner(topic.application_id, request.principal.name):
            return None
        app = topic.application_id
        if request.action is Action.DELETE:
            return (
                f"topic {name!r} is a {topic.kind} topic of Kafka Streams application {app!r}; "
                "deleting it loses the application's data"
            )
        # Streams itself purges repartition topics with DeleteRecords (KIP-811).
        if topic.kind == REPARTITION and not matcher.owned(app):
            return None
        return (
            f"topic {name!r} is a {topic.kind} topic of Kafka Streams application {app!r}; "
            "only its owners may delete records from it"
        )

    def partitions(request: TopicRequest, cluster: ClusterState) -> str | None:
        topic = matcher.classify(request.name)
        if topic is None:
            return None
        return (
            f"topic {request.name!r} is a {topic.kind} topic of Kafka Streams application "
            f"{topic.application_id!r}; adding partitions breaks its key-to-partition mapping"
        )

    def configs(request: TopicRequest, cluster: ClusterState) -> str | None:
        name = request.name
        topic = matcher.classify(name)
        if topic is None:
            return None
        after = request.requested.configs
        policy_value = after.get("cleanup.policy")
        if policy_value is None:
            return None
        policy = split_list(policy_value)
        what = f"topic {name!r} is a {topic.kind} topic of Kafka Streams application"
        what += f" {topic.application_id!r}"
        if topic.kind == CHANGELOG:
            if "compact" not in policy:
                return f"{what}; cleanup.policy {policy_value!r} would delete state (needs compact)"
            current = request.current
            windowed_before = current is not None and "delete" in split_list(
                current.configs.get("cleanup.policy")
            )
            if "delete" in policy and current is not None and not windowed_before:
                return f"{what}; adding retention to a non-windowed changelog deletes state"
            retention_bytes = after.get("retention.bytes")
            if "delete" in policy and retention_bytes is not None:
                size = parse_value("retention.bytes", retention_bytes)
                if size is not None and size != float("inf"):
                    return f"{what}; retention.bytes {retention_bytes} would delete state by size"
            return None
        if "compact" in policy:
            return f"{what}; compacting it drops records not yet processed"
        retention = after.get("retention.ms")
        if retention is not None and parse_value("retention.ms", retention) != float("inf"):
            named = any(c.name == "retention.ms" for c in request.requested.changes)
            if request.action is Action.CREATE or named:
                return (
                    f"{what}; retention.ms {retention} could delete records not yet processed "
                    "(Streams keeps them forever and purges them itself)"
                )
        return None

    facts = frozenset({Fact.TOPIC_STATE, Fact.BROKER_DEFAULTS})
    return [
        Check(frozenset({DELETE, DELETE_RECORDS}), lifecycle),
        Check(frozenset({ALTER_PARTITIONS}), partitions),
        Check(frozenset({CREATE, ALTER_CONFIGS}), configs, facts),
    ]
