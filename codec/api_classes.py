"""Every Kafka API key the proxy negotiates, classified: how the proxy treats each request.

A key missing here is unknown: never advertised in ApiVersions, and refused if sent. The table
in docs/security.md is generated from `API_CLASSES` (tests/unit/codec/test_api_classes.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ApiClass(StrEnum):
    """How the proxy treats one API key."""

    READ_ONLY = "read-only"  # forwarded
    DATA_PATH = "data path"  # forwarded; the broker's own ACLs govern it
    TOPIC_MUTATION = "topic mutation"  # judged per topic by the topic policy
    CLUSTER_MUTATION = "cluster mutation"  # judged by `admin_apis`, denied by default


@dataclass(frozen=True, slots=True)
class ApiEntry:
    """One API key: its class, and why it is there."""

    name: str
    api_class: ApiClass
    note: str = ""


R, D, T, C = (
    ApiClass.READ_ONLY,
    ApiClass.DATA_PATH,
    ApiClass.TOPIC_MUTATION,
    ApiClass.CLUSTER_MUTATION,
)
_INTERNAL = "inter-broker or controller only; no client sends it"
# The broker creates its internal topic on first use, with its own settings
# (offsets.topic.*, transaction.state.log.*, share.coordinator.state.topic.*).
_COORDINATOR_TOPIC = (
    "may create __consumer_offsets, __transaction_state or __share_group_state, "
    "as the broker's config sets them; nothing the client chooses"
)
_SUBSCRIBES = "a subscription names topics; it creates none (auto-creation is Metadata's)"
_CONFIG_RESOURCES = (
    "other config resources (brokers, the cluster default, loggers...) by `broker_configs`"
)

API_CLASSES: dict[int, ApiEntry] = {
    0: ApiEntry("Produce", D),
    1: ApiEntry("Fetch", D),
    2: ApiEntry("ListOffsets", R),
    3: ApiEntry("Metadata", T, "auto-creation is judged as a create"),
    8: ApiEntry("OffsetCommit", D, "also what AlterConsumerGroupOffsets sends"),
    9: ApiEntry("OffsetFetch", R),
    10: ApiEntry("FindCoordinator", R, _COORDINATOR_TOPIC),
    11: ApiEntry("JoinGroup", D),
    12: ApiEntry("Heartbeat", D),
    13: ApiEntry("LeaveGroup", D),
    14: ApiEntry("SyncGroup", D),
    15: ApiEntry("DescribeGroups", R),
    16: ApiEntry("ListGroups", R),
    17: ApiEntry("SaslHandshake", R, "authentication"),
    18: ApiEntry("ApiVersions", R, "capped to the versions the proxy handles"),
    19: ApiEntry("CreateTopics", T),
    20: ApiEntry("DeleteTopics", T),
    21: ApiEntry("DeleteRecords", T),
    22: ApiEntry("InitProducerId", D, "a transactional id's coordinator: " + _COORDINATOR_TOPIC),
    23: ApiEntry("OffsetForLeaderEpoch", R),
    24: ApiEntry("AddPartitionsToTxn", D),
    25: ApiEntry("AddOffsetsToTxn", D),
    26: ApiEntry("EndTxn", D),
    27: ApiEntry("WriteTxnMarkers", C, _INTERNAL),
    28: ApiEntry("TxnOffsetCommit", D),
    29: ApiEntry("DescribeAcls", R),
    30: ApiEntry("CreateAcls", C),
    31: ApiEntry("DeleteAcls", C),
    32: ApiEntry("DescribeConfigs", R),
    33: ApiEntry("AlterConfigs", T, _CONFIG_RESOURCES),
    34: ApiEntry("AlterReplicaLogDirs", C),
    35: ApiEntry("DescribeLogDirs", R),
    36: ApiEntry("SaslAuthenticate", R, "authentication"),
    37: ApiEntry("CreatePartitions", T),
    38: ApiEntry("CreateDelegationToken", C),
    39: ApiEntry("RenewDelegationToken", C),
    40: ApiEntry("ExpireDelegationToken", C),
    41: ApiEntry("DescribeDelegationToken", R),
    42: ApiEntry("DeleteGroups", D, "a group mutation, governed by the broker's Group ACLs"),
    43: ApiEntry("ElectLeaders", C),
    44: ApiEntry("IncrementalAlterConfigs", T, _CONFIG_RESOURCES),
    45: ApiEntry("AlterPartitionReassignments", T),
    46: ApiEntry("ListPartitionReassignments", R),
    47: ApiEntry("OffsetDelete", D, "a group mutation, governed by the broker's Group ACLs"),
    48: ApiEntry("DescribeClientQuotas", R),
    49: ApiEntry("AlterClientQuotas", C),
    50: ApiEntry("DescribeUserScramCredentials", R),
    51: ApiEntry("AlterUserScramCredentials", C),
    52: ApiEntry("Vote", C, _INTERNAL),
    53: ApiEntry("BeginQuorumEpoch", C, _INTERNAL),
    54: ApiEntry("EndQuorumEpoch", C, _INTERNAL),
    55: ApiEntry("DescribeQuorum", R),
    56: ApiEntry("AlterPartition", C, _INTERNAL),
    57: ApiEntry("UpdateFeatures", C),
    58: ApiEntry("Envelope", C, _INTERNAL + "; it wraps any other request"),
    59: ApiEntry("FetchSnapshot", C, _INTERNAL),
    60: ApiEntry("DescribeCluster", R),
    61: ApiEntry("DescribeProducers", R),
    62: ApiEntry("BrokerRegistration", C, _INTERNAL),
    63: ApiEntry("BrokerHeartbeat", C, _INTERNAL),
    64: ApiEntry("UnregisterBroker", C),
    65: ApiEntry("DescribeTransactions", R),
    66: ApiEntry("ListTransactions", R),
    67: ApiEntry("AllocateProducerIds", C, _INTERNAL),
    68: ApiEntry("ConsumerGroupHeartbeat", D, _SUBSCRIBES),
    69: ApiEntry("ConsumerGroupDescribe", R),
    70: ApiEntry("ControllerRegistration", C, _INTERNAL),
    71: ApiEntry("GetTelemetrySubscriptions", R),
    72: ApiEntry("PushTelemetry", D, "client metrics"),
    73: ApiEntry("AssignReplicasToDirs", C, _INTERNAL),
    74: ApiEntry("ListConfigResources", R),
    75: ApiEntry("DescribeTopicPartitions", R),
    76: ApiEntry("ShareGroupHeartbeat", D, _SUBSCRIBES),
    77: ApiEntry("ShareGroupDescribe", R),
    78: ApiEntry("ShareFetch", D),
    79: ApiEntry("ShareAcknowledge", D),
    80: ApiEntry("AddRaftVoter", C),
    81: ApiEntry("RemoveRaftVoter", C),
    82: ApiEntry("UpdateRaftVoter", C, _INTERNAL),
    83: ApiEntry("InitializeShareGroupState", C, _INTERNAL),
    84: ApiEntry("ReadShareGroupState", C, _INTERNAL),
    85: ApiEntry("WriteShareGroupState", C, _INTERNAL),
    86: ApiEntry("DeleteShareGroupState", C, _INTERNAL),
    87: ApiEntry("ReadShareGroupStateSummary", C, _INTERNAL),
    88: ApiEntry(
        "StreamsGroupHeartbeat",
        T,
        "the internal topics a topology would make the broker create are judged as creates",
    ),
    89: ApiEntry("StreamsGroupDescribe", R),
    90: ApiEntry("DescribeShareGroupOffsets", R),
    91: ApiEntry("AlterShareGroupOffsets", D, "a group mutation, as OffsetCommit"),
    92: ApiEntry("DeleteShareGroupOffsets", D, "a group mutation, as OffsetDelete"),
}

CLUSTER_MUTATIONS = frozenset(k for k, e in API_CLASSES.items() if e.api_class is C)
ADMIN_API_NAMES = frozenset(API_CLASSES[k].name for k in CLUSTER_MUTATIONS)


def api_class(api_key: int) -> ApiClass | None:
    """The class of an API key, or None if the proxy does not know it (refused)."""
    entry = API_CLASSES.get(api_key)
    return None if entry is None else entry.api_class


def markdown_table() -> str:
    """The table as docs/security.md shows it."""
    lines = ["| key | API | class | note |", "|---:|---|---|---|"]
    for key, entry in sorted(API_CLASSES.items()):
        lines.append(f"| {key} | {entry.name} | {entry.api_class.value} | {entry.note} |")
    return "\n".join(lines)
