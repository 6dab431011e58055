"""The runtime hands the configured limits to the filters that enforce them."""

from __future__ import annotations

import asyncio

from harness.messages import build
from kafka_policy_proxy.codec.registry import encode, request_class
from tests.unit.proxy.net.test_connection import FakeBroker, connect, request, started_proxy

CREATE_TOPICS = 19


def create_topics(count: int) -> bytes:
    """A CreateTopics v7 body of `count` one-partition topics."""
    cls = request_class(CREATE_TOPICS, 7)
    topic_cls = cls.__dataclass_fields__["topics"].type.__args__[0]
    topics = tuple(
        build(
            topic_cls,
            name=f"t{i}",
            num_partitions=1,
            replication_factor=1,
            assignments=(),
            configs=(),
        )
        for i in range(count)
    )
    return encode(build(cls, topics=topics, timeout=1000, validate_only=True))


async def test_the_configured_entry_bound_is_the_one_enforced() -> None:
    # 50 topics: far under the 5,000 default, over 4 x a configured bound of 10 (closed).
    fake = FakeBroker()
    broker = await asyncio.start_server(fake.handle, sock=fake.socket)
    server = await started_proxy(fake, max_entries_per_request=10)
    try:
        reader, writer = await connect(server)
        writer.write(request(CREATE_TOPICS, 7, 1, create_topics(50)))
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed, nothing answered
        assert all(key != CREATE_TOPICS for key, _ in fake.received)
        writer.close()
    finally:
        await server.shutdown()
        broker.close()
