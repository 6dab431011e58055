"""The bytes a consumer group carries about its topics, read without a full decode.

- A classic group's member metadata (ConsumerProtocolSubscription) and member assignment
  (ConsumerProtocolAssignment), as DescribeGroups returns them for protocol type `consumer`:
  every version starts with an int16 version, then the topics (non-flexible encoding).
- The header of a v2 record batch (magic 2, Kafka 0.11+), which dates the records in it.
"""

from __future__ import annotations

import struct

CONSUMER_PROTOCOL = "consumer"
# baseOffset i64, batchLength i32, partitionLeaderEpoch i32, magic i8, crc u32, attributes i16,
# lastOffsetDelta i32, baseTimestamp i64, maxTimestamp i64 (then producer fields, records).
_BATCH = struct.Struct(">qiibIhiqq")
BATCH_HEADER = 61
_LOG_APPEND_TIME = 0x08
_OFFSET_AND_SIZE = 12


class ProtocolError(ValueError):
    """The bytes are not what the consumer protocol or the record batch format says."""


class _Reader:
    def __init__(self, data: bytes) -> None:
        self._data = data
        self._at = 0

    def take(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self._at + size > len(self._data):
            raise ProtocolError("truncated")
        (value,) = struct.unpack_from(fmt, self._data, self._at)
        self._at += size
        return int(value)

    def string(self) -> str:
        size = self.take(">h")
        if size < 0 or self._at + size > len(self._data):
            raise ProtocolError("bad string length")
        text = self._data[self._at : self._at + size].decode()
        self._at += size
        return text

    def count(self) -> int:
        count = self.take(">i")
        if count < 0:
            return 0  # a null array
        if count > len(self._data):
            raise ProtocolError("bad array length")
        return count


def subscribed_topics(metadata: bytes) -> frozenset[str]:
    """The topics a classic consumer's member metadata subscribes to; ProtocolError if bad."""
    if not metadata:
        return frozenset()
    reader = _Reader(metadata)
    reader.take(">h")
    return frozenset(reader.string() for _ in range(reader.count()))


def assigned_topics(assignment: bytes) -> frozenset[str]:
    """The topics a classic consumer's member assignment names; ProtocolError if bad."""
    if not assignment:
        return frozenset()  # no assignment yet (a rebalance in progress)
    reader = _Reader(assignment)
    reader.take(">h")
    topics = set()
    for _ in range(reader.count()):
        topics.add(reader.string())
        for _ in range(reader.count()):
            reader.take(">i")
    return frozenset(topics)


def record_time(records: bytes, offset: int) -> int | None:
    """The timestamp of the batch holding `offset`, from its header: its first timestamp (a
    record at or before `offset`), or its log-append time; None if no batch holds it.

    A truncated last batch is fine as long as its header is there (a Fetch with a small
    partition limit returns just that).
    """
    at = 0
    while at + BATCH_HEADER <= len(records):
        base, length, _, magic, _, attributes, last_delta, first_ts, max_ts = _BATCH.unpack_from(
            records, at
        )
        if magic != 2:
            return None  # the old message format: no batch header to date it by
        if base > offset:
            return None
        if offset <= base + last_delta:
            return int(max_ts if attributes & _LOG_APPEND_TIME else first_ts)
        at += _OFFSET_AND_SIZE + length
    return None
