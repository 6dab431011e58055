"""StreamsGroupHeartbeat requests (KIP-1071) for tests: a join with a topology, or a plain beat."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.streams_group_heartbeat.v0 import request as m

from harness.messages import build


@dataclass(frozen=True)
class Internal:
    """An internal topic as a topology declares it (0: the coordinator or broker decides)."""

    name: str
    partitions: int = 0
    replication_factor: int = 0
    configs: Mapping[str, str] = field(default_factory=dict)


def _info(topic: Internal) -> Any:
    return build(
        m.TopicInfo,
        name=topic.name,
        partitions=topic.partitions,
        replication_factor=topic.replication_factor,
        topic_configs=tuple(build(m.KeyValue, key=k, value=v) for k, v in topic.configs.items()),
    )


def heartbeat(
    group_id: str,
    *,
    sources: Sequence[str] = (),
    changelogs: Sequence[Internal] = (),
    repartitions: Sequence[Internal] = (),
    member_epoch: int = 0,
) -> Any:
    """A join (with one subtopology, if given any topics) or, with member_epoch > 0, a beat."""
    topology = None
    if sources or changelogs or repartitions:
        sub = build(
            m.Subtopology,
            subtopology_id="0",
            source_topics=tuple(sources),
            state_changelog_topics=tuple(map(_info, changelogs)),
            repartition_source_topics=tuple(map(_info, repartitions)),
            copartition_groups=(),
        )
        topology = build(m.Topology, epoch=0, subtopologies=(sub,))
    joining = member_epoch == 0
    return build(
        m.StreamsGroupHeartbeatRequest,
        group_id=group_id,
        member_id=str(uuid.uuid4()),
        member_epoch=member_epoch,
        endpoint_information_epoch=0,
        instance_id=None,
        rack_id=None,
        rebalance_timeout=30_000 if joining else -1,
        topology=topology,
        active_tasks=() if joining else None,
        standby_tasks=() if joining else None,
        warmup_tasks=() if joining else None,
        process_id=str(uuid.uuid4()) if joining else None,
        user_endpoint=None,
        client_tags=() if joining else None,
        task_offsets=None,  # the 4.1 coordinator refuses them ("not supported yet")
        task_end_offsets=None,
    )
