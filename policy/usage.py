"""What the in-use guard saw of a topic: its latest writes and the consumer groups reading it.

Frozen facts, read by the proxy (proxy/cluster/usage_fetch.py), described for `policy eval`
(policy/offline/cluster_spec.py) and recorded in the audit event (`in_use`), so that the
proxy, the tester and the replay judge the same facts. Times are epoch milliseconds; every
"within" is measured back from `read_at`, the moment the facts were read, never from a
clock, so a replay decides as the proxy did.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

JSON = dict[str, Any]
Offsets = tuple[tuple[int, int], ...]


def iso_ms(epoch_ms: int) -> str:
    """An epoch-milliseconds time as RFC 3339 UTC with milliseconds."""
    moment = datetime.fromtimestamp(epoch_ms / 1000, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def epoch_ms(value: str | int | float | datetime) -> int:
    """An RFC 3339 time (or epoch ms, or a datetime) as epoch milliseconds; ValueError if bad."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a time")
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return round(value.timestamp() * 1000)


def _offsets(data: Mapping[Any, Any] | None) -> Offsets:
    return tuple(sorted((int(p), int(o)) for p, o in (data or {}).items()))


def _times(data: Mapping[Any, Any] | None) -> Offsets:
    return tuple(sorted((int(p), epoch_ms(t)) for p, t in (data or {}).items()))


@dataclass(frozen=True, slots=True)
class GroupUsage:
    """One consumer group as it touches the topic.

    `members`: a member is assigned or subscribed to the topic. `committed`: partition ->
    committed offset. `consumed_at`: partition -> the timestamp of the last record the group
    had consumed there (the record batch holding offset committed - 1), a lower bound on when
    it committed; a partition with a commit but no entry here could not be dated.
    """

    group: str
    state: str = ""
    members: bool = False
    committed: Offsets = ()
    consumed_at: Offsets = ()

    def to_dict(self) -> JSON:
        """Return a JSON-ready dict (times in RFC 3339)."""
        return {
            "group": self.group,
            "state": self.state,
            "members": self.members,
            "committed": {str(p): o for p, o in self.committed},
            "consumed_at": {str(p): iso_ms(t) for p, t in self.consumed_at},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GroupUsage:
        """Rebuild from `to_dict()` output."""
        return cls(
            group=data["group"],
            state=data.get("state", ""),
            members=data.get("members", False),
            committed=_offsets(data.get("committed")),
            consumed_at=_times(data.get("consumed_at")),
        )


@dataclass(frozen=True, slots=True)
class TopicUsage:
    """A topic's usage as read at `read_at`.

    `latest`: partition -> the latest record timestamp (ListOffsets MAX_TIMESTAMP; a partition
    without records is left out). `ends`: partition -> high watermark. `groups`: the consumer
    groups with members on the topic or offsets committed on it. `groups_listed`: how many
    consumer groups the cluster has; when more than the reader's bound, none was examined
    and `groups` is empty.
    """

    topic: str
    read_at: int
    latest: Offsets = ()
    ends: Offsets = ()
    groups: tuple[GroupUsage, ...] = ()
    groups_listed: int = 0

    def to_dict(self) -> JSON:
        """Return a JSON-ready dict (times in RFC 3339)."""
        return {
            "topic": self.topic,
            "read_at": iso_ms(self.read_at),
            "latest": {str(p): iso_ms(t) for p, t in self.latest},
            "ends": {str(p): o for p, o in self.ends},
            "groups": [g.to_dict() for g in self.groups],
            "groups_listed": self.groups_listed,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TopicUsage:
        """Rebuild from `to_dict()` output."""
        return cls(
            topic=data["topic"],
            read_at=epoch_ms(data["read_at"]),
            latest=_times(data.get("latest")),
            ends=_offsets(data.get("ends")),
            groups=tuple(GroupUsage.from_dict(g) for g in data.get("groups") or ()),
            groups_listed=data.get("groups_listed", 0),
        )
