"""Raw wire helpers for the attack tests: requests through the proxy or to a broker directly,
and a fence that returns once every broker has applied every change committed before it."""

from __future__ import annotations

import importlib
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from harness.messages import build, metadata_request
from harness.wire import WireClient
from kafka_policy_proxy.codec.registry import request_class


def address(bootstrap: str) -> tuple[str, int]:
    """The first host:port of a bootstrap list."""
    host, port = bootstrap.split(",", maxsplit=1)[0].rsplit(":", 1)
    return host, int(port)


def client(bootstrap: str) -> WireClient:
    """A raw connection to the first server of `bootstrap`."""
    return WireClient(*address(bootstrap))


def create_topics_request(*names: str) -> Any:
    """CreateTopics v7: one partition, one replica each (what the test policy allows)."""
    m = importlib.import_module(request_class(19, 7).__module__)
    topics = tuple(
        build(
            m.CreatableTopic,
            name=name,
            num_partitions=1,
            replication_factor=1,
            assignments=(),
            configs=(),
        )
        for name in names
    )
    return build(m.CreateTopicsRequest, topics=topics, timeout=30_000, validate_only=False)


def delete_by_id_request(*ids: uuid.UUID) -> Any:
    """DeleteTopics v6 naming topics by id only."""
    m = importlib.import_module(request_class(20, 6).__module__)
    topics = tuple(build(m.DeleteTopicState, name=None, topic_id=i) for i in ids)
    return build(m.DeleteTopicsRequest, topics=topics, timeout=30_000)


def auto_create_request(*names: str) -> Any:
    """Metadata v12 asking for `names` with auto-creation on, as a producer asks."""
    m = importlib.import_module(request_class(3, 12).__module__)
    return build(
        m.MetadataRequest,
        topics=tuple(build(m.MetadataRequestTopic, topic_id=None, name=n) for n in names),
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )


def create(wire: WireClient, name: str) -> uuid.UUID:
    """Create a topic over `wire`; return its id."""
    (result,) = wire.request(create_topics_request(name)).topics
    assert int(result.error_code) == 0, (name, result)
    assert result.topic_id is not None
    return result.topic_id  # type: ignore[no-any-return]


def wait_until(check: Callable[[], bool], timeout: float = 30.0) -> bool:
    """Poll `check` until it holds or the deadline passes."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def fence(bootstrap: str, brokers: Iterable[tuple[str, int]]) -> None:
    """Return once every broker has applied every metadata change committed before the call.

    KRaft's metadata is one ordered log: a broker that shows a topic created now also shows
    whatever an earlier answered request changed.
    """
    name = f"fence.{uuid.uuid4().hex[:12]}"
    with_direct(bootstrap, lambda wire: create(wire, name))
    probe = metadata_request((name,))
    for host, port in brokers:
        wire = WireClient(host, port)

        def shows_it(wire: WireClient = wire) -> bool:
            return int(wire.request(probe).topics[0].error_code) == 0

        try:
            assert wait_until(shows_it)
        finally:
            wire.close()


def with_direct(bootstrap: str, action: Callable[[WireClient], Any]) -> Any:
    """Run `action` on a fresh raw connection to the cluster itself."""
    wire = client(bootstrap)
    try:
        return action(wire)
    finally:
        wire.close()
