"""Budgets on the real cluster: creates, partition increases and retention changes denied over
budget (the broker unchanged), raced creates on two workers that never overshoot, and the
largest overshoot two separate proxy instances allow (docs/policy.md, "Budgets")."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from harness.proxy_process import ProxyProcess
from tests.integration.admin_clients import (
    BrokerView,
    ConfigOp,
    ConfluentAdmin,
    NewTopicSpec,
    PartitionIncrease,
    TopicOutcome,
)
from tests.integration.test_admin_clients import until

pytestmark = pytest.mark.integration

BOOTSTRAP_PORT, NODE_PORT_BASE = 25800, 25810
SECOND_BOOTSTRAP_PORT, SECOND_NODE_PORT_BASE = 25830, 25840
ROUNDS = 4
RACERS = 8  # each creates a 2-partition topic; the budget holds 6: three fit
MIB = 1024**2
RACE_BUDGETS = "\n".join(
    f"""\
  - name: b-race-{r}
    topic_prefix: b-race-{r}.
    max_partitions: 6
  - name: b-two-{r}
    topic_prefix: b-two-{r}.
    max_partitions: 6"""
    for r in range(ROUNDS)
)
POLICY = f"""\
version: 1
budgets:
  - name: b-pay
    topic_prefix: b-pay.
    max_topics: 3
    max_partitions: 10
  - name: b-logs
    topic_prefix: b-logs.
    max_retention_bytes: 10MiB
{RACE_BUDGETS}
"""


@pytest.fixture(scope="module")
def proxies(
    kafka: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ProxyProcess, ProxyProcess]]:
    """One proxy with two workers, and a second, separate instance on the same cluster."""
    started = []
    try:
        for bootstrap, base, workers in (
            (BOOTSTRAP_PORT, NODE_PORT_BASE, 2),
            (SECOND_BOOTSTRAP_PORT, SECOND_NODE_PORT_BASE, 1),
        ):
            workdir = tmp_path_factory.mktemp(f"budgets-{bootstrap}")
            policy = workdir / "policy.yaml"
            policy.write_text(POLICY)
            started.append(
                ProxyProcess(
                    workdir,
                    kafka.bootstrap_servers,
                    bootstrap,
                    base,
                    extra={"workers": workers, "policy": {"file": str(policy), "watch": False}},
                )
            )
        yield started[0], started[1]
    finally:
        for process in started:
            if process.alive():
                process.stop()


@pytest.fixture(scope="module")
def broker(kafka: Any) -> BrokerView:
    return BrokerView(kafka.bootstrap_servers)


def one(admin: ConfluentAdmin, call: str, *args: Any) -> TopicOutcome:
    (outcome,) = getattr(admin, call)(*args)
    return outcome


def partition_count(broker: BrokerView, topic: str) -> int:
    info = broker.describe(topic)
    return 0 if info is None else len(info.partitions)


def retention(broker: BrokerView, topic: str) -> str | None:
    info = broker.describe(topic)
    assert info is not None
    return info.configs["retention.bytes"].value


def test_creates_and_partition_increases_over_budget_are_denied(
    proxies: tuple[ProxyProcess, ProxyProcess], broker: BrokerView
) -> None:
    admin = ConfluentAdmin(proxies[0].bootstrap)
    assert one(admin, "create_topics", [NewTopicSpec("b-pay.a", 6, 1)]).ok
    until(lambda: partition_count(broker, "b-pay.a") or None)
    denied = one(admin, "create_topics", [NewTopicSpec("b-pay.b", 6, 1)])
    assert denied.error == "POLICY_VIOLATION"
    assert "[b-pay] b-pay uses 6 of its 10 partitions; topic 'b-pay.b' would add 6 (12 > 10)" in (
        denied.message or ""
    )
    assert "b-pay.b" not in broker.topics()
    grow = one(admin, "create_partitions", [PartitionIncrease("b-pay.a", 12)])
    assert grow.error == "POLICY_VIOLATION"
    assert "b-pay uses 6 of its 10 partitions; topic 'b-pay.a' would add 6 (12 > 10)" in (
        grow.message or ""
    )
    assert partition_count(broker, "b-pay.a") == 6
    assert one(admin, "create_partitions", [PartitionIncrease("b-pay.a", 8)]).ok
    until(lambda: partition_count(broker, "b-pay.a") == 8 or None)
    # What the increase added counts at once: 8 used, a 3-partition create no longer fits.
    late = one(admin, "create_topics", [NewTopicSpec("b-pay.c", 3, 1)])
    assert "b-pay uses 8 of its 10 partitions" in (late.message or "")
    assert "b-pay.c" not in broker.topics()


def test_a_retention_change_over_budget_is_denied(
    proxies: tuple[ProxyProcess, ProxyProcess], broker: BrokerView
) -> None:
    admin = ConfluentAdmin(proxies[0].bootstrap)
    spec = NewTopicSpec("b-logs.a", 2, 1, configs={"retention.bytes": str(2 * MIB)})
    assert one(admin, "create_topics", [spec]).ok
    until(lambda: partition_count(broker, "b-logs.a") or None)
    bigger = {"b-logs.a": [ConfigOp("retention.bytes", "SET", str(6 * MIB))]}
    denied = one(admin, "incremental_alter_configs", bigger)
    assert denied.error == "POLICY_VIOLATION"
    assert (
        "[b-logs] b-logs uses 4MiB of its 10MiB retention bytes (partitions x retention.bytes); "
        "topic 'b-logs.a' would add 8MiB (12MiB > 10MiB)"
    ) in (denied.message or "")
    assert retention(broker, "b-logs.a") == str(2 * MIB)
    fits = {"b-logs.a": [ConfigOp("retention.bytes", "SET", str(5 * MIB))]}
    assert one(admin, "incremental_alter_configs", fits).ok
    until(lambda: retention(broker, "b-logs.a") == str(5 * MIB) or None)
    # The broker's default retention.bytes is -1: a topic that inherits it is unlimited.
    unlimited = one(admin, "create_topics", [NewTopicSpec("b-logs.b", 1, 1)])
    assert "would make it unlimited (retention.bytes -1" in (unlimited.message or "")
    assert "b-logs.b" not in broker.topics()


def race(bootstraps: Sequence[str], prefix: str) -> list[tuple[str, TopicOutcome]]:
    """RACERS connections, each creating one 2-partition topic at the same moment."""
    admins = [ConfluentAdmin(bootstraps[i % len(bootstraps)]) for i in range(RACERS)]
    for admin in admins:  # connected before the race
        admin.describe_topics(["b-none"])
    start = threading.Barrier(RACERS)
    outcomes: list[tuple[str, TopicOutcome]] = []

    def create(i: int) -> None:
        start.wait()
        outcome = one(admins[i], "create_topics", [NewTopicSpec(f"{prefix}{i}", 2, 1)])
        outcomes.append((bootstraps[i % len(bootstraps)], outcome))

    threads = [threading.Thread(target=create, args=(i,)) for i in range(RACERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(outcomes) == RACERS
    return outcomes


def broker_partitions(broker: BrokerView, prefix: str) -> int:
    return sum(partition_count(broker, t) for t in broker.topics() if t.startswith(prefix))


def test_raced_creates_across_two_workers_never_overshoot(
    proxies: tuple[ProxyProcess, ProxyProcess], broker: BrokerView
) -> None:
    for r in range(ROUNDS):
        prefix = f"b-race-{r}."
        outcomes = race([proxies[0].bootstrap], prefix)
        allowed = [o for _, o in outcomes if o.ok]
        denied = [o for _, o in outcomes if not o.ok]
        assert len(allowed) == 3, outcomes
        assert all(o.error == "POLICY_VIOLATION" for o in denied), denied
        assert all(f"b-race-{r} uses 6 of its 6 partitions" in (o.message or "") for o in denied)
        until(lambda prefix=prefix: broker_partitions(broker, prefix) == 6 or None)
        assert broker_partitions(broker, prefix) == 6


def test_two_separate_instances_overshoot_at_most_one_headroom(
    proxies: tuple[ProxyProcess, ProxyProcess], broker: BrokerView
) -> None:
    # Each instance serializes its own turns and counts what it admitted, so each admits at
    # most the headroom (6 partitions): two instances together at most 2 x 6 = limit + 6.
    bootstraps = [proxies[0].bootstrap, proxies[1].bootstrap]
    for r in range(ROUNDS):
        prefix = f"b-two-{r}."
        outcomes = race(bootstraps, prefix)
        for bootstrap in bootstraps:
            admitted = sum(1 for b, o in outcomes if b == bootstrap and o.ok)
            assert admitted <= 3, outcomes
        allowed = sum(1 for _, o in outcomes if o.ok)
        assert 3 <= allowed <= 6, outcomes
        until(lambda prefix=prefix, n=allowed: broker_partitions(broker, prefix) == 2 * n or None)
        assert broker_partitions(broker, prefix) <= 6 + 6
