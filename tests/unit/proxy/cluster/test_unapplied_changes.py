"""Reads after a forwarded broker config change wait until the connected broker shows it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.describe_configs.v4.response import (
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
)
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from kafka_policy_proxy.codec.header import peek_request_header, request_body_offset
from kafka_policy_proxy.codec.registry import decode_exact, encode, request_class
from kafka_policy_proxy.codec.topic_view import ConfigResourceItem
from kafka_policy_proxy.policy.model import Fact
from kafka_policy_proxy.proxy.cluster.reader import ClusterStateReader
from kafka_policy_proxy.proxy.cluster.unapplied_changes import shows
from kafka_policy_proxy.proxy.cluster.unavailable import ClusterStateUnavailable
from tests.unit.proxy.cluster.fake_broker import metadata

OLD_RETENTION, NEW_RETENTION = "86400000", "259200000"


def broker_configs(names: list[str], retention: str) -> DescribeConfigsResponse:
    """Broker 1's answer to DescribeConfigs of broker resources: its own id and the cluster
    default ("") show a dynamic default log.retention.ms; another id is not its own."""
    results = []
    for name in names:
        config = DescribeConfigsResourceResult(
            name="log.retention.ms",
            value=retention,
            read_only=False,
            config_source=i8(3),  # DYNAMIC_DEFAULT_BROKER_CONFIG
            is_sensitive=False,
            synonyms=(),
            config_type=i8(5),
            documentation=None,
        )
        own = name in ("", "1")
        results.append(
            DescribeConfigsResult(
                error_code=ErrorCode.none if own else ErrorCode.invalid_request,
                error_message=None if own else "Unexpected broker id",
                resource_type=i8(4),
                resource_name=name,
                configs=(config,) if own else (),
            )
        )
    return DescribeConfigsResponse(throttle_time=timedelta(0), results=tuple(results))


def cluster_default(*ops: tuple[str, Any, str | None], replace: bool = False) -> ConfigResourceItem:
    return ConfigResourceItem(index=0, resource_type=4, name="", ops=ops, replace=replace)


async def test_reads_after_a_forwarded_broker_config_change_wait_until_the_broker_shows_it(
    brokers: Callable[..., Any],
) -> None:
    """The controller has committed the change when the proxy sees the answer, but the broker
    the reader asks applies it a moment later: a read in between must not cache the old value."""
    polls = 0
    broker: Any = None

    def script(key: int) -> bytes | None:
        nonlocal polls
        if key == 3:
            return encode(metadata())
        frame = broker.frames[-1]
        body = request_body_offset(frame, peek_request_header(frame))
        request = decode_exact(request_class(32, 4), frame, body)
        names = [r.resource_name for r in request.resources]
        if "" in names:
            polls += 1  # the broker applies the change on the third look
        return encode(broker_configs(names, NEW_RETENTION if polls >= 3 else OLD_RETENTION))

    broker = await brokers(script)
    reader = ClusterStateReader([broker.address], ttl_s=60)
    try:
        before = await reader.snapshot({Fact.BROKER_DEFAULTS})
        reader.invalidate_broker_defaults(
            [cluster_default(("log.retention.ms", "SET", NEW_RETENTION))]
        )
        after = await reader.snapshot({Fact.BROKER_DEFAULTS})
        again = await reader.snapshot({Fact.BROKER_DEFAULTS})
    finally:
        await reader.close()
    assert before.broker_default_configs()["retention.ms"] == OLD_RETENTION
    assert after.broker_default_configs()["retention.ms"] == NEW_RETENTION
    assert again.broker_default_configs()["retention.ms"] == NEW_RETENTION
    # Waited once: three looks on the first connection, one on the second; then the cache.
    assert polls == 4


async def test_a_change_the_broker_never_shows_fails_one_read_closed(
    brokers: Callable[..., Any],
) -> None:
    broker = await brokers(
        lambda key: encode(metadata() if key == 3 else broker_configs(["", "1"], OLD_RETENTION))
    )
    reader = ClusterStateReader([broker.address], ttl_s=60, applied_wait_s=0.05)
    try:
        reader.invalidate_broker_defaults(
            [cluster_default(("log.retention.ms", "SET", NEW_RETENTION))]
        )
        with pytest.raises(ClusterStateUnavailable, match="does not show the broker config"):
            await reader.snapshot({Fact.BROKER_COUNT})
        # Given up on: later reads do not wait for it again.
        assert (await reader.snapshot({Fact.BROKER_COUNT})).broker_count() == 1
    finally:
        await reader.close()


@pytest.mark.parametrize(
    ("dynamic", "change", "shown"),
    [
        ({"log.retention.ms": "5"}, cluster_default(("log.retention.ms", "SET", "5")), True),
        ({"log.retention.ms": "4"}, cluster_default(("log.retention.ms", "SET", "5")), False),
        ({}, cluster_default(("log.retention.ms", "DELETE", None)), True),
        ({"log.retention.ms": "4"}, cluster_default(("log.retention.ms", "DELETE", None)), False),
        (
            {"log.cleanup.policy": "delete,compact"},
            cluster_default(("log.cleanup.policy", "APPEND", "compact")),
            True,
        ),
        (
            {"log.cleanup.policy": "delete"},
            cluster_default(("log.cleanup.policy", "SUBTRACT", "delete")),
            False,
        ),
        # Keys no fact is read from are not waited for (a password reads back as null).
        ({}, cluster_default(("num.io.threads", "SET", "8")), True),
        # The legacy AlterConfigs removes the dynamic configs it does not name.
        (
            {"log.retention.ms": "5", "min.insync.replicas": "2"},
            cluster_default(("log.retention.ms", "SET", "5"), replace=True),
            False,
        ),
    ],
)
def test_a_change_is_shown_once_the_dynamic_configs_hold_it(
    dynamic: dict[str, str], change: ConfigResourceItem, shown: bool
) -> None:
    assert shows(dynamic, change) is shown
