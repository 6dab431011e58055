"""Colliding new names in one CreateTopics, through the real proxy in front of the real cluster.

`a.b` and `a_b` share their metric names. Sent together, the first is created and every later
one is denied; a name given twice is left to the broker (INVALID_REQUEST for every copy). Each
client library is tried, in both orders, repeatedly and from several threads at once; the
brokers are read directly after a fence.
"""

from __future__ import annotations

import importlib
import shutil
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from harness.messages import build
from harness.proxy_process import ProxyProcess
from harness.wire import WireClient
from kafka_policy_proxy.codec.registry import request_class
from tests.integration.admin_clients import (
    AdminHarness,
    NewTopicSpec,
    TopicOutcome,
    admin_clients,
    close_all,
)

pytestmark = pytest.mark.integration

BOOTSTRAP_PORT = 30420
NODE_PORT_BASE = 30430  # node N on 30430 + N
ROUNDS = 5
POLICY = """\
version: 1
rules:
  - name: collision
    name_collision: true
  - name: partition-bounds
    partitions: {max: 6}
"""


@pytest.fixture(scope="module")
def collision_proxy(kafka: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    """A proxy whose policy denies name collisions (and allows `_` in names)."""
    workdir = tmp_path_factory.mktemp("collisions")
    policy = workdir / "policy.yaml"
    policy.write_text(POLICY)
    process = ProxyProcess(
        workdir,
        kafka.bootstrap_servers,
        BOOTSTRAP_PORT,
        NODE_PORT_BASE,
        extra={"policy": {"file": str(policy), "watch": False}},
    )
    try:
        yield process
    finally:
        code = process.stop()
        if code != 0:
            shutil.copy(process.log_path, workdir / "kept-proxy.log")
        assert code == 0


@pytest.fixture(scope="module")
def clients(collision_proxy: ProxyProcess, kafka: Any) -> Iterator[dict[str, AdminHarness]]:
    harnesses = admin_clients(collision_proxy.bootstrap, kafka.classpath())
    yield harnesses
    close_all(harnesses.values())


@pytest.fixture(scope="module")
def direct(kafka: Any) -> AdminClient:
    """An admin client on the brokers themselves."""
    return AdminClient({"bootstrap.servers": kafka.bootstrap_servers, "log_level": 3})


def broker_topics_after_fence(direct: AdminClient) -> set[str]:
    """The brokers' topics once every change committed before the call is applied.

    KRaft's metadata is one ordered log: a broker that shows the fence topic shows every change
    answered before it was created.
    """
    fence = f"fence.{uuid.uuid4().hex[:8]}"
    for future in direct.create_topics([NewTopic(fence, 1, 1)]).values():
        future.result(30)
    for _ in range(200):
        topics = set(direct.list_topics(timeout=10).topics)
        if fence in topics:
            return topics
    raise AssertionError("the fence topic never showed up")


def assert_collision_denied(outcome: TopicOutcome, first: str) -> None:
    assert (outcome.ok, outcome.error) == (False, "POLICY_VIOLATION"), outcome
    if outcome.message is not None:
        assert "[collision]" in outcome.message and repr(first) in outcome.message, outcome


@pytest.mark.parametrize("client", ["java", "confluent", "kafka-python"])
def test_only_the_first_of_colliding_new_names_is_created(
    clients: dict[str, AdminHarness], direct: AdminClient, client: str
) -> None:
    admin = clients[client]
    created: set[str] = set()
    refused: set[str] = set()
    for round_ in range(ROUNDS):
        u = uuid.uuid4().hex[:8]
        # Alternate the order: whichever comes first is kept.
        pair = [f"bc.{u}.x", f"bc_{u}_x"] if round_ % 2 else [f"bc_{u}_x", f"bc.{u}.x"]
        triple = [f"t{u}.a.b", f"t{u}_a.b", f"t{u}.a_b"]
        outcomes = admin.create_topics([NewTopicSpec(n, 1, 1) for n in [*pair, *triple]])
        by_name = {o.topic: o for o in outcomes}
        assert by_name[pair[0]].ok and by_name[triple[0]].ok, outcomes
        assert_collision_denied(by_name[pair[1]], pair[0])
        for later in triple[1:]:
            assert_collision_denied(by_name[later], triple[0])
        created |= {pair[0], triple[0]}
        refused |= {pair[1], *triple[1:]}
    topics = broker_topics_after_fence(direct)
    assert created <= topics
    assert not refused & topics


def _create_request(names: list[str]) -> Any:
    cls = request_class(19, 7)
    module = importlib.import_module(cls.__module__)
    topics = tuple(
        build(
            module.CreatableTopic,
            name=n,
            num_partitions=1,
            replication_factor=1,
            assignments=(),
            configs=(),
        )
        for n in names
    )
    return build(cls, topics=topics, timeout=30_000, validate_only=False)


def test_a_repeated_name_keeps_the_brokers_answer(
    collision_proxy: ProxyProcess, direct: AdminClient
) -> None:
    """`a.b, a_b, a.b`: a_b is denied by the policy; both copies of a.b get INVALID_REQUEST."""
    client = WireClient("127.0.0.1", collision_proxy.bootstrap_port)
    names: list[str] = []
    for _ in range(ROUNDS):
        u = uuid.uuid4().hex[:8]
        first, later = f"dup.{u}", f"dup_{u}"
        response = client.request(_create_request([first, later, first]))
        # One answer per distinct name, as the broker gives for a repeated one.
        assert sorted((t.name, t.error_code.value) for t in response.topics) == [
            (first, 42),
            (later, 44),
        ]
        names += [first, later]
    client.close()
    assert not set(names) & broker_topics_after_fence(direct)


def test_concurrent_batches_create_one_name_per_key(
    clients: dict[str, AdminHarness], direct: AdminClient
) -> None:
    """Several clients race batches of the same colliding names: at most one per key exists."""
    u = uuid.uuid4().hex[:8]
    variants = [f"race.{u}.k", f"race_{u}.k", f"race.{u}_k", f"race_{u}_k"]
    batches = [variants[i:] + variants[:i] for i in range(len(variants))]

    names = sorted(clients)
    # One thread per client (a harness is not shared between threads), all racing.
    pools = {name: ThreadPoolExecutor(max_workers=1) for name in names}
    try:
        futures = [
            pools[names[i % len(names)]].submit(
                clients[names[i % len(names)]].create_topics,
                [NewTopicSpec(n, 1, 1) for n in batches[i % len(batches)]],
            )
            for i in range(ROUNDS * len(names))
        ]
        results = [f.result(120) for f in futures]
    finally:
        for pool in pools.values():
            pool.shutdown()
    oks = {o.topic for outcomes in results for o in outcomes if o.ok}
    topics = broker_topics_after_fence(direct)
    assert len(set(variants) & topics) == 1, set(variants) & topics
    assert oks <= topics
