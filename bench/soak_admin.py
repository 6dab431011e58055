"""The soak's admin requests, pipelined, each answer checked against the decision the policy
must give in the fault phase now in progress."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench import soak_wire as wire
from bench.soak_traffic import Phase, Tally, pause
from bench.soak_wire import AsyncWire, Misordered

POLICY_VIOLATION = 44


@dataclass(frozen=True)
class Expect:
    """One topic of one admin request: allowed or denied by the policy."""

    topic: str
    allowed: bool


@dataclass(frozen=True)
class AdminTopics:
    """The topics admin rounds change: one they may alter, one the policy protects."""

    target: str
    protected: str


async def admin_traffic(
    host: str, port: int, topics: AdminTopics, *, phase: Phase, tally: Tally, stop: asyncio.Event
) -> None:
    """Rounds of pipelined admin and Metadata requests; every answer checked.

    A policy-denied topic must get POLICY_VIOLATION, always. An allowed one must not, except
    while the cluster state cannot be read (`Phase.state_unreadable_until`), when the proxy
    may deny it under `cluster-state` (fail closed). Those denials, of either kind of topic,
    are counted: a hang must produce some. Broker errors (a broker restarting) are counted,
    not judged.
    """
    target, protected = topics.target, topics.protected
    previous: str | None = None
    conn: AsyncWire | None = None
    while not stop.is_set():
        created = f"soak.adm-{uuid.uuid4().hex[:10]}"
        retention = random.choice(["3600000", "7200000", "86400000"])
        batch: list[
            tuple[Any, list[Expect], Callable[[Any], list[tuple[str, int, str | None]]]]
        ] = [
            (wire.metadata(None), [], _no_results),
            (
                wire.create_topics(
                    [
                        (created, {"min.insync.replicas": "2"}),
                        (f"Soak_{created[9:]}", {"min.insync.replicas": "2"}),
                    ]
                ),
                [Expect(created, True), Expect(f"Soak_{created[9:]}", False)],
                _topic_results,
            ),
            (
                wire.set_config(target, "retention.ms", retention),
                [Expect(target, True)],
                _resource_results,
            ),
            (
                wire.set_config(target, "retention.ms", "60000"),
                [Expect(target, False)],
                _resource_results,
            ),
            (wire.metadata((target,)), [], _no_results),
            (
                wire.delete_records([target, protected]),
                [Expect(target, True), Expect(protected, False)],
                _partition_results,
            ),
            (
                wire.delete_topics([n for n in (previous, protected) if n is not None]),
                [Expect(n, n != protected) for n in (previous, protected) if n is not None],
                _deleted_results,
            ),
        ]
        try:
            if conn is None:
                conn = await AsyncWire.open(host, port)
            for message, _, _ in batch:
                await conn.send(message)
            for message, expects, results in batch:
                response = await asyncio.wait_for(conn.receive(), 90)
                _judge(results(response), expects, phase, tally, type(message).__name__)
            tally.admin_rounds += 1
            previous = created
        except Misordered:
            tally.misordered_responses += 1
            conn = _drop(conn)
        except (OSError, asyncio.IncompleteReadError, TimeoutError):
            tally.reconnects["admin"] += 1
            conn = _drop(conn)
        await pause(stop, 2)
    _drop(conn)


def _drop(conn: AsyncWire | None) -> None:
    if conn is not None:
        conn.close()


def _judge(
    results: list[tuple[str, int, str | None]],
    expects: list[Expect],
    phase: Phase,
    tally: Tally,
    api: str,
) -> None:
    by_topic = {e.topic: e.allowed for e in expects}
    for topic, code, message in results:
        allowed = by_topic.get(topic)
        if allowed is None:
            tally.wrong_decisions.append(f"{api}: an answer for {topic!r}, which was not asked")
            continue
        denied = code == POLICY_VIOLATION
        unreadable = time.monotonic() < phase.state_unreadable_until
        # DeleteRecords answers carry no message: only an allowed one's denial is known to be
        # the state's doing.
        said = "[cluster-state]" in message if message is not None else allowed
        fail_closed = denied and said
        if unreadable and fail_closed:
            # Either expectation: the proxy could not read the state, so it refused.
            tally.fail_closed_denials += 1
        elif not allowed and not denied:
            tally.wrong_decisions.append(
                f"{api}: {topic} was not denied in phase {phase.name} (error code {code})"
            )
        elif allowed and denied:
            tally.wrong_decisions.append(
                f"{api}: {topic} was denied in phase {phase.name}: {message}"
            )
        elif allowed and code != 0:
            tally.broker_errors[f"{api}:{code}"] += 1


def _no_results(_response: Any) -> list[tuple[str, int, str | None]]:
    return []


def _topic_results(response: Any) -> list[tuple[str, int, str | None]]:
    return [(t.name, int(t.error_code), t.error_message) for t in response.topics]


def _resource_results(response: Any) -> list[tuple[str, int, str | None]]:
    return [(r.resource_name, int(r.error_code), r.error_message) for r in response.responses]


def _partition_results(response: Any) -> list[tuple[str, int, str | None]]:
    return [(t.name, int(p.error_code), None) for t in response.topics for p in t.partitions]


def _deleted_results(response: Any) -> list[tuple[str, int, str | None]]:
    unknown = 3  # the previous round's topic may not exist (its create met a restart)
    return [
        (r.name, 0 if int(r.error_code) == unknown else int(r.error_code), r.error_message)
        for r in response.responses
    ]
