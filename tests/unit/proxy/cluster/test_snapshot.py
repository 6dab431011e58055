"""`snapshot` against a scripted fake broker (paging, batching, errors) and its exit codes."""

from __future__ import annotations

import asyncio
import io
import json
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.schema.api_versions.v0.response import ApiVersion, ApiVersionsResponse
from kio.schema.describe_configs.v4.response import (
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
)
from kio.schema.describe_topic_partitions.v0.response import (
    Cursor,
    DescribeTopicPartitionsResponse,
    DescribeTopicPartitionsResponsePartition,
    DescribeTopicPartitionsResponseTopic,
)
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.response import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i16, i32

from harness.ports import refused_port
from kafka_policy_proxy.cli import main
from kafka_policy_proxy.codec.header import (
    peek_request_header,
    request_body_offset,
    response_header,
)
from kafka_policy_proxy.codec.registry import decode_exact, encode, request_class
from kafka_policy_proxy.policy.model import TopicState
from kafka_policy_proxy.proxy.cluster.broker_defaults import topic_defaults
from kafka_policy_proxy.proxy.cluster.snapshot import write_snapshot
from kafka_policy_proxy.proxy.cluster.unavailable import ClusterStateUnavailable

# name -> replica lists by partition.
TOPICS: dict[str, list[list[int]]] = {
    "alpha": [[1, 2], [2, 1], [1, 2]],
    "beta": [[2, 1]],
    "gamma": [[1, 2], [2, 1]],
}
TOPIC_CONFIGS = {
    # (value, source code, sensitive)
    "cleanup.policy": ("compact", 1, False),
    "retention.ms": ("604800000", 5, False),
    "min.insync.replicas": ("2", 3, False),
    "secret.thing": (None, 2, True),
}
BROKER_CONFIGS = {
    "log.retention.hours": "168",
    "log.cleanup.policy": "delete",
    "num.partitions": "3",
}


def topic_id(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_DNS, name)


def entry(name: str, value: str | None, source: int, sensitive: bool) -> Any:
    return DescribeConfigsResourceResult(
        name=name,
        value=value,
        read_only=False,
        config_source=i8(source),
        is_sensitive=sensitive,
        synonyms=(),
        config_type=i8(2),
        documentation=None,
    )


class FakeCluster:
    """A one-broker cluster (id 1) that answers the snapshot's requests as Kafka 4 does."""

    def __init__(
        self, *, describe_topic_partitions: bool = True, failing: dict[str, ErrorCode] | None = None
    ) -> None:
        self.describe_topic_partitions = describe_topic_partitions
        self.failing = failing or {}
        self.requests: list[Any] = []
        self.out: io.StringIO | None = None
        # Lines written when each topic DescribeConfigs arrived: proves batch-by-batch writing.
        self.written_at_describe: list[int] = []
        self.server: asyncio.Server | None = None

    @property
    def bootstrap(self) -> str:
        assert self.server is not None
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    def kinds(self) -> Counter[str]:
        return Counter(type(m).__name__.removesuffix("Request") for m in self.requests)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                frame = await reader.readexactly(int.from_bytes(await reader.readexactly(4)))
                header = peek_request_header(frame)
                cls = request_class(header.api_key, header.api_version)
                request = decode_exact(cls, frame, request_body_offset(frame, header))
                self.requests.append(request)
                body = encode(self.answer(request))
                head = response_header(header.correlation_id, header.api_key, header.api_version)
                writer.write(len(head + body).to_bytes(4, "big") + head + body)
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()

    def answer(self, request: Any) -> Any:
        name = type(request).__name__
        if name == "ApiVersionsRequest":
            keys = [(3, 12, 13), (18, 0, 4), (32, 4, 4)]
            if self.describe_topic_partitions:
                keys.append((75, 0, 0))
            return ApiVersionsResponse(
                error_code=ErrorCode.none,
                api_keys=tuple(
                    ApiVersion(api_key=i16(k), min_version=i16(lo), max_version=i16(hi))
                    for k, lo, hi in keys
                ),
            )
        if name == "MetadataRequest":
            names = sorted(TOPICS) if request.topics is None else [t.name for t in request.topics]
            # Kafka answers named topics in no particular order.
            return self.metadata(list(reversed(names)))
        if name == "DescribeConfigsRequest":
            return self.describe_configs(request)
        assert name == "DescribeTopicPartitionsRequest"
        return self.describe_topic_partitions_page(request)

    def metadata(self, names: list[str]) -> MetadataResponse:
        return MetadataResponse(
            throttle_time=timedelta(0),
            brokers=(
                MetadataResponseBroker(node_id=BrokerId(2), host="b2", port=i32(9093), rack="r2"),
                MetadataResponseBroker(node_id=BrokerId(1), host="b1", port=i32(9092), rack=None),
            ),
            cluster_id="fake-cluster",
            controller_id=BrokerId(2),
            topics=tuple(
                MetadataResponseTopic(
                    error_code=ErrorCode.none,
                    name=TopicName(n),
                    topic_id=topic_id(n),
                    is_internal=n.startswith("__"),
                    partitions=tuple(
                        MetadataResponsePartition(
                            error_code=ErrorCode.none,
                            partition_index=i32(p),
                            leader_id=BrokerId(r[0]),
                            replica_nodes=tuple(BrokerId(b) for b in r),
                            isr_nodes=tuple(BrokerId(b) for b in r),
                            offline_replicas=(),
                        )
                        for p, r in enumerate(TOPICS[n])
                    ),
                )
                for n in names
            ),
        )

    def describe_configs(self, request: Any) -> DescribeConfigsResponse:
        results = []
        for resource in request.resources:
            if resource.resource_type == 4:  # the broker: only its own id answers
                ok = resource.resource_name == "1"
                configs = tuple(entry(k, v, 4, False) for k, v in BROKER_CONFIGS.items())
                error = ErrorCode.none if ok else ErrorCode.invalid_request
            else:
                assert self.out is not None
                self.written_at_describe.append(len(self.out.getvalue().splitlines()))
                error = self.failing.get(resource.resource_name, ErrorCode.none)
                ok = error is ErrorCode.none
                configs = tuple(entry(k, *v) for k, v in TOPIC_CONFIGS.items())
            results.append(
                DescribeConfigsResult(
                    error_code=error,
                    error_message=None if ok else "not for you",
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                    configs=configs if ok else (),
                )
            )
        return DescribeConfigsResponse(throttle_time=timedelta(0), results=tuple(results))

    def describe_topic_partitions_page(self, request: Any) -> DescribeTopicPartitionsResponse:
        # Kafka's paging: names from the cursor's on, partitions up to the limit, then a cursor.
        assert request.topics == ()
        cursor = request.cursor
        remaining = int(request.response_partition_limit)
        topics = []
        next_cursor = None
        for name in sorted(n for n in TOPICS if cursor is None or n >= cursor.topic_name):
            if remaining == 0:
                next_cursor = Cursor(topic_name=TopicName(name), partition_index=i32(0))
                break
            start = cursor.partition_index if cursor and name == cursor.topic_name else 0
            replicas = TOPICS[name][start : start + remaining]
            topics.append(
                DescribeTopicPartitionsResponseTopic(
                    error_code=ErrorCode.none,
                    name=TopicName(name),
                    topic_id=topic_id(name),
                    is_internal=False,
                    partitions=tuple(
                        DescribeTopicPartitionsResponsePartition(
                            error_code=ErrorCode.none,
                            partition_index=i32(start + i),
                            leader_id=BrokerId(r[0]),
                            replica_nodes=tuple(BrokerId(b) for b in r),
                        )
                        for i, r in enumerate(replicas)
                    ),
                )
            )
            remaining -= len(replicas)
            if start + len(replicas) < len(TOPICS[name]):
                next_cursor = Cursor(
                    topic_name=TopicName(name), partition_index=i32(start + len(replicas))
                )
                break
        return DescribeTopicPartitionsResponse(
            throttle_time=timedelta(0), topics=tuple(topics), next_cursor=next_cursor
        )


@pytest.fixture
async def fake() -> AsyncIterator[FakeCluster]:
    cluster = FakeCluster()
    cluster.server = await asyncio.start_server(cluster.serve, "127.0.0.1", 0)
    yield cluster
    cluster.server.close()


async def snapshot(cluster: FakeCluster, **options: Any) -> list[dict[str, Any]]:
    cluster.out = io.StringIO()
    count = await write_snapshot(cluster.bootstrap, cluster.out, timeout_s=5, **options)
    lines = [json.loads(line) for line in cluster.out.getvalue().splitlines()]
    assert count == len(lines) - 2
    return lines


def without_time(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in line.items() if k != "taken_at"} for line in lines]


async def test_every_line_of_a_snapshot(fake: FakeCluster) -> None:
    lines = await snapshot(fake)
    cluster, *topics, end = lines
    assert cluster.pop("taken_at").endswith("Z")
    assert cluster == {
        "kind": "cluster",
        "schema": 1,
        "cluster_id": "fake-cluster",
        "bootstrap_servers": fake.bootstrap,
        "controller_id": 2,
        "brokers": [
            {"id": 1, "host": "b1", "port": 9092, "rack": None},
            {"id": 2, "host": "b2", "port": 9093, "rack": "r2"},
        ],
        "defaults": dict(sorted(topic_defaults(BROKER_CONFIGS).items())),
    }
    assert cluster["defaults"]["retention.ms"] == "604800000"  # from log.retention.hours
    assert cluster["defaults"]["num.partitions"] == "3"
    assert [t["name"] for t in topics] == ["alpha", "beta", "gamma"]
    assert topics[0] == {
        "kind": "topic",
        "cluster_id": "fake-cluster",
        "name": "alpha",
        "topic_id": str(topic_id("alpha")),
        "partitions": 3,
        "replication_factor": 2,
        "assignment": [[0, [1, 2]], [1, [2, 1]], [2, [1, 2]]],
        "configs": {
            "cleanup.policy": "compact",
            "min.insync.replicas": "2",
            "retention.ms": "604800000",
            "secret.thing": None,
        },
        "config_sources": {
            "cleanup.policy": "DYNAMIC_TOPIC_CONFIG",
            "min.insync.replicas": "DYNAMIC_DEFAULT_BROKER_CONFIG",
            "retention.ms": "DEFAULT_CONFIG",
            "secret.thing": "DYNAMIC_BROKER_CONFIG",
        },
        "internal": False,
        "marked_for_deletion": False,
    }
    # Fields in the documented order, configs by name (stable diffs between snapshots).
    assert list(topics[0]) == [
        "kind",
        "cluster_id",
        "name",
        "topic_id",
        "partitions",
        "replication_factor",
        "assignment",
        "configs",
        "config_sources",
        "internal",
        "marked_for_deletion",
    ]
    assert list(topics[0]["configs"]) == sorted(TOPIC_CONFIGS)
    state = TopicState.from_dict(topics[0])
    assert state.configs["cleanup.policy"] == "compact"
    assert state.assignment == ((0, (1, 2)), (1, (2, 1)), (2, (1, 2)))
    assert end == {"kind": "end", "cluster_id": "fake-cluster", "topics": 3}
    assert fake.kinds()["DescribeTopicPartitions"] == 1


async def test_tiny_pages_and_batches_give_the_same_snapshot(fake: FakeCluster) -> None:
    whole = await snapshot(fake)
    fake.requests.clear()
    fake.written_at_describe.clear()
    paged = await snapshot(fake, partition_page=2, config_batch=2)
    assert without_time(paged) == without_time(whole)
    # Six partitions two at a time; alpha spans the first two pages.
    pages = [m for m in fake.requests if type(m).__name__.startswith("DescribeTopicPartitions")]
    assert [
        (c.topic_name, c.partition_index) if c else None for c in (p.cursor for p in pages)
    ] == [
        None,
        ("alpha", 2),
        ("gamma", 0),
    ]
    # Topic DescribeConfigs for [alpha, beta] then [gamma]; the first batch was written before
    # the second was asked for (the cluster line counts as one).
    assert fake.written_at_describe == [1, 1, 3]


async def test_without_describe_topic_partitions_metadata_pages_the_names(
    fake: FakeCluster,
) -> None:
    whole = await snapshot(fake)
    fake.describe_topic_partitions = False
    fake.requests.clear()
    paged = await snapshot(fake, config_batch=2)
    assert without_time(paged) == without_time(whole)
    named = [m.topics for m in fake.requests if type(m).__name__ == "MetadataRequest"]
    # The broker list, the broker ids for the defaults, all names, then two batches.
    assert [None if t is None else [x.name for x in t] for t in named] == [
        [],
        [],
        None,
        ["alpha", "beta"],
        ["gamma"],
    ]
    assert "DescribeTopicPartitions" not in fake.kinds()


async def test_a_topic_whose_configs_fail_fails_the_snapshot(fake: FakeCluster) -> None:
    fake.failing = {"gamma": ErrorCode.topic_authorization_failed}
    with pytest.raises(ClusterStateUnavailable) as failure:
        await snapshot(fake, config_batch=2)
    assert str(failure.value) == (
        "cannot read the configs of 1 topic(s) from the cluster: DescribeConfigs for topic "
        "'gamma': TOPIC_AUTHORIZATION_FAILED (29): not for you"
    )
    assert fake.out is not None
    assert '"kind":"end"' not in fake.out.getvalue()


# -- the command's exit codes


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exited:
        main(["snapshot", *args])
    code = exited.value.code
    assert isinstance(code, int)
    return code, capsys.readouterr().err


def test_an_unreachable_cluster_exits_1_and_leaves_no_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "snap.jsonl"
    with refused_port() as port:
        code, err = run(
            capsys, "--bootstrap-server", f"127.0.0.1:{port}", "--out", str(out), "--timeout", "2"
        )
    assert code == 1
    assert err.startswith("kafka-policy-proxy snapshot: cannot read the broker list from the ")
    assert f"127.0.0.1:{port}" in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bootstrap-server", "nohost"], "--bootstrap-server: 'nohost' is not host:port"),
        (["--bootstrap-server", "h:1,h:99999"], "--bootstrap-server: 'h:99999' is not host:port"),
        (["--command-config", "{config}"], "{config}: ssl.truststore.type: JKS (Kafka's default"),
        (["--out", "{tmp}/no/such/dir/s.jsonl"], "cannot write {tmp}/no/such/dir/s.jsonl.tmp: "),
    ],
)
def test_bad_arguments_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    config = tmp_path / "client.properties"
    config.write_text("security.protocol=SSL\nssl.truststore.location=/etc/truststore.jks\n")
    defaults = {"--bootstrap-server": "127.0.0.1:1", "--out": str(tmp_path / "s.jsonl")}
    values = dict(zip(args[::2], args[1::2], strict=True))
    argv = [x for k, v in {**defaults, **values}.items() for x in (k, v)]
    argv = [a.format(config=config, tmp=tmp_path) for a in argv]
    code, err = run(capsys, *argv)
    assert code == 2
    assert err.startswith(
        f"kafka-policy-proxy snapshot: {message.format(config=config, tmp=tmp_path)}"
    )
    assert err.count("\n") == 1
    assert not (tmp_path / "s.jsonl").exists() and not (tmp_path / "s.jsonl.tmp").exists()


@pytest.mark.parametrize("timeout", ["0", "-1", "soon", "inf"])
def test_the_timeout_must_be_a_positive_number(
    capsys: pytest.CaptureFixture[str], timeout: str
) -> None:
    code, err = run(capsys, "--bootstrap-server", "h:1", "--out", "-", "--timeout", timeout)
    assert code == 2
    assert "--timeout" in err


async def test_a_cursor_that_does_not_move_fails_instead_of_paging_forever(
    fake: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = fake.describe_topic_partitions_page

    def stuck(request: Any) -> DescribeTopicPartitionsResponse:
        response = page(request)
        return replace(
            response, next_cursor=Cursor(topic_name=TopicName("alpha"), partition_index=i32(2))
        )

    monkeypatch.setattr(fake, "describe_topic_partitions_page", stuck)
    with pytest.raises(ClusterStateUnavailable, match=r"the same cursor \('alpha', 2\) again"):
        await snapshot(fake, partition_page=2)
