"""The audit topic: each decision record in a CloudEvents envelope, produced with librdkafka.

Batched and asynchronous (librdkafka's own queue, bounded by audit.kafka.buffer_events); an
event that cannot be queued or delivered is counted as dropped and logged. `write` returns a
future of the delivery, which audit.on_failure: closed waits for before a mutation goes on.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

import structlog
from confluent_kafka import KafkaError, Message, Producer

from kafka_policy_proxy.proxy.audit.sink import AuditDeliveryError
from kafka_policy_proxy.proxy.config import ProxyConfig
from kafka_policy_proxy.proxy.kafka_client.librdkafka import librdkafka_config
from kafka_policy_proxy.proxy.kafka_client.security import ClientSecurity
from kafka_policy_proxy.proxy.metrics import AUDIT_BYTES, AUDIT_EVENTS

log = structlog.get_logger("proxy.audit.kafka_sink")

EVENT_TYPE = "io.github.kafka-policy-proxy.decision"
_POLL_INTERVAL_S = 0.01
# How long shutdown waits for the events still queued to be delivered.
CLOSE_TIMEOUT_S = 5.0


def producer_settings(config: ProxyConfig, security: ClientSecurity) -> dict[str, Any]:
    """librdkafka settings for the audit topic: its brokers, with the proxy's own security
    (upstream.client_properties, or upstream.tls and cluster_state.sasl)."""
    audit = config.audit.kafka
    assert audit is not None
    servers = audit.bootstrap_servers or config.upstream.bootstrap_servers
    settings: dict[str, Any] = {
        "bootstrap.servers": ",".join(str(s) for s in servers),
        "client.id": "kafka-policy-proxy-audit",
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": audit.linger_ms,
        "queue.buffering.max.messages": audit.buffer_events,
        "message.timeout.ms": int(audit.delivery_timeout_s * 1000),
        "log_level": 3,
    }
    return settings | librdkafka_config(security)


def envelope(record: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The record as the `data` of a CloudEvents 1.0 event (JSON structured mode)."""
    return {
        "specversion": "1.0",
        "id": record.get("decision_id"),
        "source": source,
        "type": EVENT_TYPE,
        "time": record.get("time"),
        "subject": record.get("topic") or record.get("resource"),
        "datacontenttype": "application/json",
        "data": record,
    }


class KafkaAuditSink:
    """Produces decision records to the audit topic, keyed by topic (or resource); an AuditSink."""

    enabled = True

    def __init__(self, config: ProxyConfig, source: str, security: ClientSecurity) -> None:
        audit = config.audit.kafka
        assert audit is not None
        self.topic = audit.topic
        self._source = source
        self._producer = Producer(producer_settings(config, security))
        self._poller: asyncio.Task[None] | None = None
        self._work = asyncio.Event()
        self._written = AUDIT_EVENTS.labels(sink="kafka", result="written")
        self._dropped = AUDIT_EVENTS.labels(sink="kafka", result="dropped")
        self._bytes = AUDIT_BYTES.labels(sink="kafka")

    def write(self, record: Mapping[str, Any]) -> asyncio.Future[None]:
        """Queue one record; the future settles when the brokers have it (or never will)."""
        loop = asyncio.get_running_loop()
        delivered: asyncio.Future[None] = loop.create_future()
        if self._poller is None:
            self._poller = loop.create_task(self._poll())
        key = record.get("topic") or record.get("resource") or ""
        value = json.dumps(envelope(record, self._source), separators=(",", ":"), default=str)

        def on_delivery(error: KafkaError | None, _message: Message) -> None:
            if error is None:
                self._written.inc()
                self._bytes.inc(len(value))
                if not delivered.done():
                    delivered.set_result(None)
            else:
                self._drop(delivered, f"not delivered: {error.str()}")

        try:
            self._producer.produce(
                self.topic, value.encode(), key=str(key).encode(), on_delivery=on_delivery
            )
        except BufferError:
            self._drop(delivered, "audit.kafka.buffer_events is full")
        except Exception as exc:  # KafkaException: e.g. a record larger than the topic takes
            self._drop(delivered, f"not queued: {exc}")
        self._work.set()
        return delivered

    def _drop(self, delivered: asyncio.Future[None], reason: str) -> None:
        self._dropped.inc()
        log.warning("audit event dropped", sink="kafka", topic=self.topic, reason=reason)
        if not delivered.done():
            delivered.set_exception(AuditDeliveryError(f"audit topic {self.topic}: {reason}"))
            delivered.exception()  # retrieved: nobody need wait for it in open mode

    async def _poll(self) -> None:
        # Delivery callbacks run inside poll(), here, on the event loop's thread.
        while True:
            await self._work.wait()
            self._work.clear()
            while len(self._producer):
                self._producer.poll(0)
                await asyncio.sleep(_POLL_INTERVAL_S)
            self._producer.poll(0)

    async def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Deliver what is queued (at most `timeout_s`), then stop; the rest is dropped."""
        if self._poller is not None:
            self._poller.cancel()
        left = self._producer.flush(timeout_s)  # blocks: callbacks must run on this thread
        if left:
            self._dropped.inc(left)
            log.warning("audit events not delivered at shutdown", sink="kafka", events=left)
