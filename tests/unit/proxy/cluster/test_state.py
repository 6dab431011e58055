"""The pure parts of the cluster-state reader, and its failure handling against a fake broker."""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.describe_configs.v4.response import (
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
)
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.response import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32

from codec.header import peek_request_header, request_body_offset, response_header
from codec.registry import decode_exact, encode, request_class
from codec.topic_view import ConfigResourceItem
from policy.config_synonyms import TOPIC_CONFIG_SYNONYMS
from policy.model import ConfigMap, Fact
from proxy.cluster.broker_defaults import TOPIC_ONLY_DEFAULTS, topic_defaults
from proxy.cluster.client import SaslAuthenticationError, SaslCredentials, ScramClient
from proxy.cluster.state import ClusterStateReader, ClusterStateUnavailable, _shows

# RFC 7677, section 3: one SCRAM-SHA-256 exchange.
RFC7677_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC7677_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC7677_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC7677_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc7677_client() -> ScramClient:
    return ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC7677_CLIENT_NONCE)


def test_scram_sha_256_matches_the_rfc_7677_exchange() -> None:
    scram = rfc7677_client()
    assert scram.first_message() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert scram.final_message(RFC7677_SERVER_FIRST) == RFC7677_CLIENT_FINAL
    scram.verify_server_final(RFC7677_SERVER_FINAL)


def test_scram_rejects_a_wrong_server_signature() -> None:
    scram = rfc7677_client()
    scram.final_message(RFC7677_SERVER_FIRST)
    forged = b"v=" + base64.b64encode(b"\0" * 32)
    with pytest.raises(SaslAuthenticationError, match="signature"):
        scram.verify_server_final(forged)


def test_scram_reports_the_servers_error() -> None:
    scram = rfc7677_client()
    scram.final_message(RFC7677_SERVER_FIRST)
    with pytest.raises(SaslAuthenticationError, match="invalid-proof"):
        scram.verify_server_final(b"e=invalid-proof")


@pytest.mark.parametrize(
    "server_first",
    [
        b"r=someone-elses-nonce,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
        b"r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
        b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==",
    ],
)
def test_scram_rejects_a_bad_server_first_message(server_first: bytes) -> None:
    with pytest.raises(SaslAuthenticationError):
        rfc7677_client().final_message(server_first)


def test_scram_escapes_the_username() -> None:
    scram = ScramClient("SCRAM-SHA-512", "a=b,c", "x", nonce="n0nce")
    assert scram.first_message() == b"n,,n=a=3Db=2Cc,r=n0nce"


def test_sasl_credentials_reject_an_unknown_mechanism() -> None:
    with pytest.raises(ValueError, match="GSSAPI"):
        SaslCredentials("GSSAPI", "user", "secret")
    assert "secret" not in repr(SaslCredentials("PLAIN", "user", "secret"))


def test_retention_ms_prefers_ms_then_minutes_then_hours() -> None:
    hours = {"log.retention.hours": "168", "log.retention.minutes": None}
    assert topic_defaults(hours)["retention.ms"] == "604800000"
    minutes = {**hours, "log.retention.minutes": "90"}
    assert topic_defaults(minutes)["retention.ms"] == "5400000"
    millis = {**minutes, "log.retention.ms": "1234"}
    assert topic_defaults(millis)["retention.ms"] == "1234"


def test_negative_retention_means_forever() -> None:
    assert topic_defaults({"log.retention.hours": "-1"})["retention.ms"] == "-1"
    assert topic_defaults({"log.retention.minutes": "-5"})["retention.ms"] == "-1"


def test_roll_hours_and_flush_scheduler_fill_in_for_unset_millis() -> None:
    defaults = topic_defaults(
        {
            "log.roll.ms": None,
            "log.roll.hours": "2",
            "log.roll.jitter.hours": "1",
            "log.flush.interval.ms": None,
            "log.flush.scheduler.interval.ms": "3000",
        }
    )
    assert defaults["segment.ms"] == "7200000"
    assert defaults["segment.jitter.ms"] == "3600000"
    assert defaults["flush.ms"] == "3000"


def test_broker_names_become_topic_names_and_others_are_dropped() -> None:
    defaults = topic_defaults(
        {
            "log.cleanup.policy": "compact,delete",
            "log.cleaner.min.cleanable.ratio": "0.25",
            "message.max.bytes": "2000000",
            "min.insync.replicas": "2",
            "num.partitions": "6",
            "default.replication.factor": "3",
            "log.dirs": "/data",
            "num.io.threads": "8",
        }
    )
    assert defaults == {
        **TOPIC_ONLY_DEFAULTS,
        "cleanup.policy": "compact,delete",
        "min.cleanable.dirty.ratio": "0.25",
        "max.message.bytes": "2000000",
        "min.insync.replicas": "2",
        "num.partitions": "6",
        "default.replication.factor": "3",
    }


def test_every_broker_synonym_belongs_to_one_topic_config() -> None:
    owners = [broker for synonyms in TOPIC_CONFIG_SYNONYMS.values() for broker, _ in synonyms]
    assert len(owners) == len(set(owners))
    assert not set(TOPIC_ONLY_DEFAULTS) & set(TOPIC_CONFIG_SYNONYMS)


# -- failure handling against a scripted fake broker

TOPIC_ID = uuid.UUID("6b1b8f0e-6a4e-4d6b-9a59-0d1f2f9b7c11")


def metadata(topic_error: ErrorCode = ErrorCode.none) -> MetadataResponse:
    """One broker (id 1) and one topic 'orders' with one partition on it."""
    partition = MetadataResponsePartition(
        error_code=ErrorCode.none,
        partition_index=i32(0),
        leader_id=BrokerId(1),
        leader_epoch=i32(0),
        replica_nodes=(BrokerId(1),),
        isr_nodes=(BrokerId(1),),
        offline_replicas=(),
    )
    topic = MetadataResponseTopic(
        error_code=topic_error,
        name=TopicName("orders"),
        topic_id=TOPIC_ID,
        is_internal=False,
        partitions=(partition,) if topic_error is ErrorCode.none else (),
        topic_authorized_operations=i32(-(2**31)),
    )
    return MetadataResponse(
        throttle_time=timedelta(0),
        brokers=(MetadataResponseBroker(node_id=BrokerId(1), host="h", port=i32(1), rack=None),),
        cluster_id="c",
        controller_id=BrokerId(1),
        topics=(topic,),
    )


def describe(error: ErrorCode = ErrorCode.none) -> DescribeConfigsResponse:
    """The configs of topic 'orders' (or an error for it)."""
    config = DescribeConfigsResourceResult(
        name="retention.ms",
        value="1000",
        read_only=False,
        config_source=i8(1),
        is_sensitive=False,
        synonyms=(),
        config_type=i8(5),
        documentation=None,
    )
    result = DescribeConfigsResult(
        error_code=error,
        error_message=None if error is ErrorCode.none else "not allowed",
        resource_type=i8(2),
        resource_name="orders",
        configs=(config,) if error is ErrorCode.none else (),
    )
    return DescribeConfigsResponse(throttle_time=timedelta(0), results=(result,))


Script = Callable[[int], bytes | None]


class FakeBroker:
    """Answers each request with what `script(api_key)` returns: an encoded body, or nothing."""

    def __init__(self, script: Script, *, close_after: int | None = None) -> None:
        self.script = script
        self.close_after = close_after  # close each connection after this many answers
        self.requests: list[int] = []
        self.frames: list[bytes] = []  # every request, for scripts that read them
        self.connections = 0
        self.server: asyncio.Server | None = None

    @property
    def address(self) -> tuple[str, int]:
        assert self.server is not None
        return ("127.0.0.1", self.server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        answered = 0
        try:
            while self.close_after is None or answered < self.close_after:
                size = int.from_bytes(await reader.readexactly(4))
                frame = await reader.readexactly(size)
                header = peek_request_header(frame)
                self.requests.append(header.api_key)
                self.frames.append(frame)
                body = self.script(header.api_key)
                if body is None:
                    await asyncio.sleep(3600)  # never answers
                    continue
                head = response_header(header.correlation_id, header.api_key, header.api_version)
                writer.write(len(head + body).to_bytes(4, "big") + head + body)
                answered += 1
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()


def answers(metadata_response: Any = None, describe_response: Any = None) -> Script:
    """A script answering Metadata (3) and DescribeConfigs (32) with these responses."""
    bodies = {
        3: encode(metadata_response or metadata()),
        32: encode(describe_response or describe()),
    }
    return lambda key: bodies[key]


@pytest.fixture
async def brokers() -> AsyncIterator[Callable[..., Any]]:
    """Start fake brokers; all are closed at the end."""
    started: list[FakeBroker] = []

    async def start(script: Script, **options: Any) -> FakeBroker:
        broker = FakeBroker(script, **options)
        await broker.start()
        started.append(broker)
        return broker

    yield start
    for broker in started:
        assert broker.server is not None
        broker.server.close()


async def test_a_healthy_answer_becomes_the_topic_state(brokers: Callable[..., Any]) -> None:
    broker = await brokers(answers())
    reader = ClusterStateReader([broker.address])
    try:
        cluster = await reader.snapshot({Fact.TOPIC_STATE}, topics=["orders"])
    finally:
        await reader.close()
    state = cluster.topic("orders")
    assert state is not None
    assert (state.topic_id, state.partitions, state.replication_factor) == (str(TOPIC_ID), 1, 1)
    assert state.configs == {"retention.ms": "1000"}


@pytest.mark.parametrize(
    ("script", "message"),
    [
        (
            answers(describe_response=describe(ErrorCode.topic_authorization_failed)),
            "DescribeConfigs for topic 'orders': TOPIC_AUTHORIZATION_FAILED (29): not allowed",
        ),
        (
            answers(metadata(ErrorCode.topic_authorization_failed)),
            "Metadata for topic 'orders': TOPIC_AUTHORIZATION_FAILED (29)",
        ),
        (lambda key: b"\x01\x02", "Metadata to 127.0.0.1:"),
    ],
    ids=["describe-error", "metadata-error", "undecodable"],
)
async def test_broker_errors_fail_closed_and_are_not_cached(
    brokers: Callable[..., Any], script: Script, message: str
) -> None:
    broker = await brokers(script)
    reader = ClusterStateReader([broker.address], ttl_s=60)
    try:
        for _ in range(2):
            with pytest.raises(ClusterStateUnavailable) as failure:
                await reader.snapshot({Fact.TOPIC_STATE}, topics=["orders"])
            assert str(failure.value).startswith(
                "cannot read the state of topic(s) 'orders' from the cluster: "
            )
            assert message in str(failure.value)
    finally:
        await reader.close()
    assert broker.requests.count(3) == 2


async def test_a_broker_that_does_not_answer_times_out(brokers: Callable[..., Any]) -> None:
    broker = await brokers(lambda key: None)
    reader = ClusterStateReader([broker.address], request_timeout_s=0.2)
    try:
        with pytest.raises(ClusterStateUnavailable, match=r"Metadata to \S+ failed: timed out"):
            await reader.snapshot({Fact.BROKER_COUNT})
    finally:
        await reader.close()


async def test_after_a_failure_the_next_bootstrap_server_is_used(
    brokers: Callable[..., Any],
) -> None:
    broken = await brokers(lambda key: b"")
    healthy = await brokers(answers())
    reader = ClusterStateReader([broken.address, healthy.address], ttl_s=0)
    try:
        with pytest.raises(ClusterStateUnavailable):
            await reader.snapshot({Fact.BROKER_COUNT})
        cluster = await reader.snapshot({Fact.BROKER_COUNT})
    finally:
        await reader.close()
    assert cluster.broker_count() == 1
    assert (broken.connections, healthy.connections) == (1, 1)


async def test_a_server_that_closes_without_answering_is_passed_over_in_the_same_read(
    brokers: Callable[..., Any],
) -> None:
    # As a broker that is stopping or starting does: the read goes on to the next server.
    broken = await brokers(answers(), close_after=0)
    healthy = await brokers(answers())
    reader = ClusterStateReader([broken.address, healthy.address], ttl_s=0)
    try:
        cluster = await reader.snapshot({Fact.BROKER_COUNT})
    finally:
        await reader.close()
    assert cluster.broker_count() == 1
    assert (broken.connections, healthy.connections) == (1, 1)


@pytest.mark.parametrize("servers", [1, 2])
async def test_a_read_fails_closed_when_every_server_closes_without_answering_each_asked_once(
    brokers: Callable[..., Any], servers: int
) -> None:
    # With one server, nowhere else to go: once is enough (a TLS listener, say).
    broken = [await brokers(answers(), close_after=0) for _ in range(servers)]
    reader = ClusterStateReader([b.address for b in broken], ttl_s=0)
    try:
        with pytest.raises(ClusterStateUnavailable, match=r"Metadata to \S+ failed"):
            await reader.snapshot({Fact.BROKER_COUNT})
    finally:
        await reader.close()
    assert [b.connections for b in broken] == [1] * servers


async def test_a_connection_the_broker_closed_is_replaced_once(
    brokers: Callable[..., Any],
) -> None:
    broker = await brokers(answers(), close_after=1)
    reader = ClusterStateReader([broker.address], ttl_s=0)
    try:
        await reader.snapshot({Fact.BROKER_COUNT})
        await asyncio.sleep(0.05)  # the broker has closed the idle connection
        cluster = await reader.snapshot({Fact.BROKER_COUNT})
    finally:
        await reader.close()
    assert cluster.broker_count() == 1
    assert broker.connections == 2


async def test_a_deleted_topic_is_known_absent_by_name_and_by_id(
    brokers: Callable[..., Any],
) -> None:
    broker = await brokers(answers())
    reader = ClusterStateReader([broker.address], ttl_s=60)
    try:
        found = await reader.snapshot({Fact.TOPIC_STATE}, topics=["orders"])
        assert found.topic("orders") is not None
        asked = len(broker.requests)
        reader.deleted("orders", str(TOPIC_ID))
        # The broker still shows it (as one that has not applied the delete yet would).
        by_name = await reader.snapshot({Fact.TOPIC_STATE}, topics=["orders"])
        by_id = await reader.snapshot({Fact.TOPIC_STATE}, topic_ids=[str(TOPIC_ID)])
    finally:
        await reader.close()
    assert by_name.topic("orders") is None
    assert by_id.topic_by_id(str(TOPIC_ID)) is None
    assert len(broker.requests) == asked


async def test_a_forgotten_id_is_read_from_the_cluster_again(
    brokers: Callable[..., Any],
) -> None:
    created = False
    unknown = encode(metadata(ErrorCode.unknown_topic_id))

    def script(key: int) -> bytes | None:
        if key == 3 and not created:
            return unknown
        return answers()(key)

    broker = await brokers(script)
    reader = ClusterStateReader([broker.address], ttl_s=60)
    try:
        before = await reader.snapshot({Fact.TOPIC_STATE}, topic_ids=[str(TOPIC_ID)])
        created = True
        cached = await reader.snapshot({Fact.TOPIC_STATE}, topic_ids=[str(TOPIC_ID)])
        reader.forget_ids([str(TOPIC_ID)])
        after = await reader.snapshot({Fact.TOPIC_STATE}, topic_ids=[str(TOPIC_ID)])
    finally:
        await reader.close()
    assert before.topic_by_id(str(TOPIC_ID)) is None
    assert cached.topic_by_id(str(TOPIC_ID)) is None
    state = after.topic_by_id(str(TOPIC_ID))
    assert state is not None and state.name == "orders"


async def test_invalidating_a_topic_drops_an_id_entry_that_resolved_to_it(
    brokers: Callable[..., Any],
) -> None:
    broker = await brokers(answers())
    reader = ClusterStateReader([broker.address], ttl_s=60)
    try:
        await reader.snapshot({Fact.TOPIC_STATE}, topic_ids=[str(TOPIC_ID)])
        asked = len(broker.requests)
        reader.invalidate("orders")
        await reader.snapshot({Fact.TOPIC_STATE}, topic_ids=[str(TOPIC_ID)])
    finally:
        await reader.close()
    assert broker.requests[asked:] == [3, 32]


async def test_a_changed_topic_is_served_as_changed_without_a_round_trip(
    brokers: Callable[..., Any],
) -> None:
    broker = await brokers(answers())
    reader = ClusterStateReader([broker.address], ttl_s=60)
    try:
        before = await reader.snapshot({Fact.TOPIC_STATE}, topics=["orders"])
        await reader.snapshot({Fact.TOPIC_STATE}, topic_ids=[str(TOPIC_ID)])
        await reader.snapshot({Fact.TOPIC_NAMES})
        old = before.topic("orders")
        assert old is not None
        asked = len(broker.requests)
        reader.changed(replace(old, configs=ConfigMap({"retention.ms": "5"})))
        by_name = await reader.snapshot({Fact.TOPIC_STATE, Fact.TOPIC_NAMES}, topics=["orders"])
        # A config change moves no name or partition: the all-topics facts stay cached too.
        assert len(broker.requests) == asked
        # The id entry held the old state: it is read again, not served stale.
        await reader.snapshot({Fact.TOPIC_STATE}, topic_ids=[str(TOPIC_ID)])
    finally:
        await reader.close()
    changed = by_name.topic("orders")
    assert changed is not None and changed.configs == {"retention.ms": "5"}
    assert broker.requests[asked:] == [3, 32]


# -- broker config changes the proxy forwarded

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
    assert polls == 3  # waited once, then read from the cache


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
    assert _shows(dynamic, change) is shown
