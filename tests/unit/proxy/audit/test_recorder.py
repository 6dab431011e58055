"""The decision recorder over its sinks: every record to every sink, and audit.on_failure."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Mapping
from pathlib import Path
from typing import Any

from kafka_policy_proxy.policy.admin_apis import AdminDecision, AdminRequest
from kafka_policy_proxy.policy.model import Principal
from kafka_policy_proxy.proxy.audit.file_sink import AuditLog
from kafka_policy_proxy.proxy.audit.recorder import DecisionRecorder
from kafka_policy_proxy.proxy.audit.sink import AuditDeliveryError, AuditSink
from tests.unit.proxy.contexts import context

CREATE_ACLS = 30
ALLOWED = AdminDecision(AdminRequest("CreateAcls", Principal("User:alice")), allowed=True)


class Sink:
    """A sink that keeps its records and hands out the delivery the test gives it."""

    def __init__(
        self,
        name: str,
        closed: list[str],
        *,
        enabled: bool = True,
        delivery: Awaitable[None] | None = None,
    ) -> None:
        self.name = name
        self.enabled = enabled
        self.records: list[dict[str, Any]] = []
        self._closed = closed
        self._delivery = delivery

    def write(self, record: Mapping[str, Any]) -> Awaitable[None] | None:
        self.records.append(dict(record))
        return self._delivery

    async def close(self) -> None:
        self._closed.append(self.name)


def recorder(*sinks: AuditSink, closed: bool = False) -> DecisionRecorder:
    """A recorder writing to these sinks, in this order."""
    return DecisionRecorder(sinks, proxy_id="proxy-a:9192", cluster_id=lambda: "c1", closed=closed)


async def test_every_record_goes_to_every_sink_and_deliveries_are_kept(tmp_path: Path) -> None:
    delivered = asyncio.get_running_loop().create_future()
    topic = Sink("topic", [], delivery=delivered)
    file = AuditLog(tmp_path / "audit.jsonl")
    written = recorder(file, topic).record_admin(context(CREATE_ACLS, 3), "rev-1", ALLOWED)
    assert written == [delivered]  # the file wrote it at once: nothing to wait for
    [line] = (tmp_path / "audit.jsonl").read_text().splitlines()
    assert json.loads(line) == topic.records[0]
    assert topic.records[0]["policy_revision"] == "rev-1"
    await file.close()


async def test_no_record_is_made_when_no_sink_is_enabled() -> None:
    off = Sink("off", [], enabled=False)
    assert recorder(off).record_admin(context(CREATE_ACLS, 3), "rev-1", ALLOWED) == []
    assert off.records == []
    on = Sink("on", [])
    recorder(off, on).record_admin(context(CREATE_ACLS, 3), "rev-1", ALLOWED)
    assert len(off.records) == len(on.records) == 1


async def test_closed_waits_for_the_deliveries_and_names_a_failed_one() -> None:
    loop = asyncio.get_running_loop()
    delivered, lost = loop.create_future(), loop.create_future()
    closed = recorder(Sink("topic", []), closed=True)
    assert closed.waits_for_audit
    waiting = asyncio.ensure_future(closed.confirmed([delivered]))
    await asyncio.sleep(0)
    assert not waiting.done()
    delivered.set_result(None)
    assert await waiting is None
    lost.set_exception(AuditDeliveryError("audit topic audit: not delivered: broker down"))
    assert await closed.confirmed([lost]) == (
        "the audit log cannot be written (audit.on_failure: closed): "
        "audit topic audit: not delivered: broker down"
    )
    assert await closed.confirmed([]) is None


async def test_open_never_waits_for_a_delivery() -> None:
    pending: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    open_ = recorder(Sink("topic", [], delivery=pending))
    assert not open_.waits_for_audit
    written = open_.record_admin(context(CREATE_ACLS, 3), "rev-1", ALLOWED)
    assert written == [pending]
    assert await open_.confirmed(written) is None
    assert not pending.done()


async def test_closing_the_recorder_closes_every_sink_in_order() -> None:
    closed: list[str] = []
    await recorder(Sink("file", closed), Sink("topic", closed)).close()
    assert closed == ["file", "topic"]
