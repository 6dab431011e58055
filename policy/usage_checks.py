"""The in-use guard's checks: deny deleting a topic that is still written or read, and
DeleteRecords beyond what an active consumer group has consumed.

Both read the in-use facts folded into the request (`TopicRequest.usage`, policy/usage.py)
and measure every window back from the facts' `read_at`, so a replay decides as the proxy
did. Facts that were not read, a group whose commit cannot be dated and a high watermark
that was not read all deny (fail closed).
"""

from __future__ import annotations

from collections.abc import Callable

from kafka_policy_proxy.policy.cluster import ClusterState
from kafka_policy_proxy.policy.model import Action, TopicRequest
from kafka_policy_proxy.policy.rules import InUseConstraint
from kafka_policy_proxy.policy.usage import GroupUsage, TopicUsage, iso_ms

# Groups (and partitions) a message names before "and N more".
LISTED = 3
Fn = Callable[[TopicRequest, ClusterState], str | None]


def ago(elapsed_ms: int) -> str:
    """A duration as '4s', '3m20s', '2h5m' or '3d4h' (the two largest units)."""
    if elapsed_ms < 1000:
        return f"{max(elapsed_ms, 0)}ms"
    seconds = elapsed_ms // 1000
    parts = []
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(parts[:2])


def _when(at_ms: int, read_at: int) -> str:
    return f"{iso_ms(at_ms)}, {ago(read_at - at_ms)} before the check"


def _listed(items: list[str], sep: str = ", ") -> str:
    shown = sep.join(items[:LISTED])
    return shown if len(items) <= LISTED else f"{shown} and {len(items) - LISTED} more"


def group_use(group: GroupUsage, read_at: int, window_ms: int | None) -> str | None:
    """How the group uses the topic (members, a recent or undatable commit), or None."""
    if group.members:
        return "members on the topic"
    if not group.committed:
        return None
    if window_ms is None:
        return "offsets committed"
    dated = dict(group.consumed_at)
    newest = -1
    for partition, offset in group.committed:
        at = dated.get(partition)
        if at is None:
            return (
                f"committed offset {offset} on partition {partition}, whose time cannot be "
                "established"
            )
        newest = max(newest, at)
    if newest >= read_at - window_ms:
        return f"consumed a record of {_when(newest, read_at)}"
    return None


def _too_many(request: TopicRequest, usage: TopicUsage, limit: int) -> str | None:
    if usage.groups_listed <= limit:
        return None
    return (
        f"topic {request.name!r}: the cluster has {usage.groups_listed} consumer groups, more "
        f"than the {limit} the in-use check examines (max_groups); denied because its use "
        "cannot be checked"
    )


def _not_read(request: TopicRequest) -> str:
    return (
        f"topic {request.name!r}: its in-use facts (latest writes, consumer groups) were not "
        "read; denied because the in-use check cannot be made"
    )


def in_use_checks(spec: InUseConstraint, suffix: str = "") -> dict[Action, Fn]:
    """The delete and delete_records checks of one `in_use` constraint."""
    written = spec.window_ms("written_within")
    consumed = spec.window_ms("consumed_within")
    limit = spec.max_groups

    def delete(request: TopicRequest, cluster: ClusterState) -> str | None:
        usage = request.usage
        if usage is None:
            return _not_read(request)
        if (denied := _too_many(request, usage, limit)) is not None:
            return denied
        read_at = usage.read_at
        reasons = []
        if written is not None and usage.latest:
            last = max(t for _, t in usage.latest)
            if last >= read_at - written:
                reasons.append(f"last written at {_when(last, read_at)}")
        users = [
            f"{g.group!r} ({use})"
            for g in usage.groups
            if (use := group_use(g, read_at, consumed)) is not None
        ]
        if users:
            reasons.append(f"consumer group(s) {_listed(users)}")
        if not reasons:
            return None
        needs = [
            f"{label} {value}"
            for label, value in (
                ("writes", spec.written_within),
                ("consumers", spec.consumed_within),
            )
            if value is not None
        ]
        quiet = f" (none within: {', '.join(needs)})" if needs else ""
        return (
            f"topic {request.name!r} is in use: {'; '.join(reasons)}; "
            f"it may be deleted once it is no longer used{quiet}{suffix}"
        )

    def delete_records(request: TopicRequest, cluster: ClusterState) -> str | None:
        usage = request.usage
        if usage is None:
            return _not_read(request)
        if (denied := _too_many(request, usage, limit)) is not None:
            return denied
        active = [g for g in usage.groups if group_use(g, usage.read_at, consumed) is not None]
        ends = dict(usage.ends)
        problems = []
        for partition, offset in request.record_offsets:
            commits = [(o, g.group) for g in active for p, o in g.committed if p == partition]
            if not commits:
                continue
            lowest, group = min(commits)
            target = ends.get(partition) if offset < 0 else offset
            if target is None:
                problems.append(
                    f"partition {partition}: the high watermark (offset -1) was not read"
                )
            elif target > lowest:
                others = len({g for _, g in commits}) - 1
                among = f", the lowest of {others + 1} active groups" if others else ""
                problems.append(
                    f"partition {partition}: deleting before offset {target} would delete "
                    f"records group {group!r} has not consumed (committed offset {lowest}"
                    f"{among}); records may be deleted up to offset {lowest}"
                )
        if not problems:
            return None
        return f"topic {request.name!r}: {_listed(problems, '; ')}{suffix}"

    return {Action.DELETE: delete, Action.DELETE_RECORDS: delete_records}
