"""Consumer protocol member bytes and record batch headers, as Kafka's clients write them."""

from __future__ import annotations

import struct


def _string(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def subscription(version: int, *topics: str) -> bytes:
    """A ConsumerProtocolSubscription: version, topics, user data (null), and for v1+ owned
    partitions (none), as the Java client writes it."""
    body = struct.pack(">hi", version, len(topics)) + b"".join(_string(t) for t in topics)
    body += struct.pack(">i", -1)  # user data: null
    if version >= 1:
        body += struct.pack(">i", 0)  # owned partitions
    return body


def assignment(*topics: tuple[str, list[int]]) -> bytes:
    body = struct.pack(">hi", 0, len(topics))
    for topic, partitions in topics:
        body += _string(topic) + struct.pack(f">i{len(partitions)}i", len(partitions), *partitions)
    return body + struct.pack(">i", -1)


def batch(base: int, count: int, first_ts: int, max_ts: int, attributes: int = 0) -> bytes:
    """A v2 record batch header (61 bytes) and `count` records' worth of filler."""
    records = b"\0" * (10 * count)
    length = 49 + len(records)  # everything after baseOffset and batchLength
    header = struct.pack(
        ">qiibIhiqqqhii",
        base,
        length,
        0,
        2,
        0,
        attributes,
        count - 1,
        first_ts,
        max_ts,
        -1,
        -1,
        -1,
        count,
    )
    return header + records
