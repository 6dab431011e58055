"""The snapshot file format (docs/snapshot.md), parsed from lines into an in-memory cluster.

`kafka-policy-proxy snapshot` writes one cluster line, one line per topic and an end line.
This module only parses text it is given: `policy eval --cluster` passes a file's lines, the
Spark jobs pass each line as they read it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.model import ConfigMap, TopicState

SNAPSHOT_SCHEMA = 1
# The config source of a value set on the topic itself (DescribeConfigs' source 1).
SET_ON_TOPIC = "DYNAMIC_TOPIC_CONFIG"


class SnapshotError(ValueError):
    """A snapshot that is incomplete or does not follow the format."""


@dataclass(frozen=True, slots=True)
class ClusterLine:
    """The first line: the cluster id, how many brokers, and the broker default configs."""

    cluster_id: str | None
    brokers: int
    defaults: ConfigMap


@dataclass(frozen=True, slots=True)
class TopicLine:
    """One topic: its state, and where each of its configs comes from.

    The state's `overrides` are the configs whose source is DYNAMIC_TOPIC_CONFIG; both are None
    for a line without `config_sources`, which says nothing about inheritance.
    """

    cluster_id: str | None
    state: TopicState
    config_sources: Mapping[str, str] | None


@dataclass(frozen=True, slots=True)
class EndLine:
    """The last line: how many topic lines came before it."""

    cluster_id: str | None
    topics: int


SnapshotLine = ClusterLine | TopicLine | EndLine


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A complete snapshot: its cluster id and the cluster."""

    cluster_id: str | None
    cluster: InMemoryCluster


def parse_line(text: str) -> SnapshotLine:
    """One line of a snapshot; SnapshotError if it is not one."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SnapshotError(f"not a snapshot line: {exc}") from None
    if not isinstance(data, dict):
        raise SnapshotError("not a snapshot line: not a JSON object")
    try:
        return _line(data)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise SnapshotError(f"bad {data.get('kind')} line: {type(exc).__name__}: {exc}") from None


def _line(data: Mapping[str, Any]) -> SnapshotLine:
    kind = data.get("kind")
    if kind == "topic":
        state = TopicState.from_dict(data)
        sources = data.get("config_sources")
        if sources is not None:
            # Only a value set on the topic itself is out of a new broker default's reach.
            set_on_topic = (key for key, source in sources.items() if source == SET_ON_TOPIC)
            state = replace(state, overrides=frozenset(set_on_topic))
        return TopicLine(data["cluster_id"], state, sources)
    if kind == "cluster":
        if data.get("schema") != SNAPSHOT_SCHEMA:
            raise ValueError(f"schema {data.get('schema')!r}, this reader knows {SNAPSHOT_SCHEMA}")
        return ClusterLine(
            data["cluster_id"],
            len(data.get("brokers") or ()) or 1,
            ConfigMap(data.get("defaults") or {}),
        )
    if kind == "end":
        return EndLine(data["cluster_id"], int(data["topics"]))
    raise ValueError(f"unknown line kind {kind!r}")


def snapshot_cluster(head: ClusterLine, topics: Iterable[TopicState]) -> InMemoryCluster:
    """The cluster a cluster line and its topics describe."""
    return InMemoryCluster.of(topics, head.brokers, head.defaults)


def parse_snapshot(lines: Iterable[str]) -> Snapshot:
    """A whole snapshot from its lines (blank ones skipped); SnapshotError if it is incomplete,
    mixes clusters or gives a topic twice."""
    head: ClusterLine | None = None
    end: EndLine | None = None
    topics: list[TopicState] = []
    names: set[str] = set()
    ids: set[str] = set()
    for number, text in enumerate(lines, 1):
        if not text.strip():
            continue
        if end is not None:
            raise SnapshotError(f"line {number}: a line after the end line")
        try:
            line = parse_line(text)
        except SnapshotError as exc:
            raise SnapshotError(f"line {number}: {exc}") from None
        if isinstance(line, ClusterLine) != (head is None):
            raise SnapshotError(f"line {number}: the cluster line must come first, and once")
        if head is not None and line.cluster_id != head.cluster_id:
            raise SnapshotError(
                f"line {number}: a line of cluster {line.cluster_id} in the snapshot of "
                f"cluster {head.cluster_id}"
            )
        match line:
            case ClusterLine():
                head = line
            case TopicLine():
                state = line.state
                if state.name in names:
                    raise SnapshotError(f"line {number}: topic {state.name} given twice")
                if state.topic_id is not None and state.topic_id in ids:
                    raise SnapshotError(f"line {number}: topic id {state.topic_id} given twice")
                names.add(state.name)
                if state.topic_id is not None:
                    ids.add(state.topic_id)
                topics.append(state)
            case EndLine():
                end = line
    if head is None or end is None:
        raise SnapshotError("no end line: the snapshot is incomplete")
    if end.topics != len(topics):
        raise SnapshotError(
            f"{len(topics)} topic lines, the end line says {end.topics}: the snapshot is incomplete"
        )
    return Snapshot(head.cluster_id, snapshot_cluster(head, topics))
