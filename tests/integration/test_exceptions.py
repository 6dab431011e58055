"""An exception that expires mid-test, on the real cluster, with no reload in between.

A proxy (two workers) enforces `narrow` (at most 2 partitions on `exc.` topics) with an
exception waiving it for the anonymous principal until EXPIRES_AFTER_S seconds after the
policy was written. A 6-partition create is allowed while it is in force (the broker, read
directly, has the topic; the audit record is `allowed` with `waived`); the same create right
after the expiry instant is denied with POLICY_VIOLATION (the broker has no such topic, as the
proxy never forwarded it), and the proxy loaded its policy once.
"""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from harness.proxy_process import ProxyProcess
from tests.integration.admin_clients import BrokerView, ConfluentAdmin, NewTopicSpec
from tests.integration.test_admin_clients import until

pytestmark = pytest.mark.integration

BOOTSTRAP_PORT, NODE_PORT_BASE, ADMIN_PORT = 25700, 25710, 25790
# Long enough for two workers to start and the first create to finish well inside it.
EXPIRES_AFTER_S = 40.0
EXCEPTION = "anonymous-wide-topics"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
def proxy(
    kafka: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ProxyProcess, datetime]]:
    workdir = tmp_path_factory.mktemp("exceptions")
    expires = datetime.now(UTC) + timedelta(seconds=EXPIRES_AFTER_S)
    policy = workdir / "policy.yaml"
    policy.write_text(
        yaml.safe_dump(
            {
                "rules": [
                    {"name": "narrow", "match": {"topic_prefix": "exc."}, "partitions": {"max": 2}}
                ],
                "exceptions": [
                    {
                        "name": EXCEPTION,
                        "match": {"principals": ["User:ANONYMOUS"], "topic_prefix": "exc."},
                        "waive": ["narrow"],
                        "reason": "the integration test",
                        "ticket": "TEST-1",
                        "expires": expires.isoformat(),
                    }
                ],
                "exception_policy": {"max_days": 1},
            }
        )
    )
    process = ProxyProcess(
        workdir,
        kafka.bootstrap_servers,
        BOOTSTRAP_PORT,
        NODE_PORT_BASE,
        extra={
            "policy": {"file": str(policy)},
            "audit": {"file": str(workdir / "audit.jsonl")},
            "admin": {"bind_host": "127.0.0.1", "port": ADMIN_PORT},
            "workers": 2,
        },
    )
    process.audit_path = workdir / "audit.jsonl"
    try:
        yield process, expires
    finally:
        assert process.stop() == 0


def metrics() -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{ADMIN_PORT}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def record_of(proxy: ProxyProcess, topic: str) -> dict[str, Any]:
    """The topic's audit record, from whichever worker's file holds it."""
    assert proxy.audit_path is not None
    folder = proxy.audit_path.parent

    def find() -> dict[str, Any] | None:
        for path in sorted(folder.glob("audit.worker-*.jsonl")):
            for line in path.read_text().splitlines():
                if line and (event := json.loads(line))["topic"] == topic:
                    return event  # type: ignore[no-any-return]
        return None

    return until(find)


def none_in_force(samples: Samples) -> Samples | None:
    """The samples once the in-force gauge (refreshed every 2 s) shows no exception."""
    return samples if samples[("kpp_policy_exceptions_in_force", frozenset())] == 0 else None


def reloads(samples: Samples) -> float:
    return sum(v for (name, _), v in samples.items() if name == "kpp_policy_reloads_total")


def test_an_exception_waives_until_its_expiry_and_not_after(
    kafka: Any, proxy: tuple[ProxyProcess, datetime]
) -> None:
    process, expires = proxy
    broker = BrokerView(kafka.bootstrap_servers)
    admin = ConfluentAdmin(process.bootstrap)
    try:
        wide = f"exc.{uuid.uuid4().hex[:8]}"
        assert datetime.now(UTC) < expires - timedelta(seconds=10), "the proxy started too late"
        [allowed] = admin.create_topics([NewTopicSpec(wide, 6, 1)])
        assert allowed.ok, allowed
        assert until(lambda: wide in broker.topics() or None)
        assert len(until(lambda: broker.describe(wide)).partitions) == 6
        record = record_of(process, wide)
        assert (record["decision"], record["violations"]) == ("allowed", [])
        [waiver] = record["waived"]
        assert (waiver["rule"], waiver["exception"], waiver["ticket"]) == (
            "narrow",
            EXCEPTION,
            "TEST-1",
        )
        assert datetime.fromisoformat(waiver["expires"]) == expires
        samples = metrics()
        assert samples[("kpp_policy_exceptions_in_force", frozenset())] == 1
        assert samples[("kpp_policy_waivers_total", frozenset({("exception", EXCEPTION)}))] == 1
        left = samples[
            ("kpp_policy_exception_expiry_seconds", frozenset({("exception", EXCEPTION)}))
        ]
        assert 0 < left <= EXPIRES_AFTER_S

        # Right after the expiry instant, with no reload: the same kind of create is denied.
        time.sleep(max(0.0, (expires - datetime.now(UTC)).total_seconds()) + 0.05)
        late = f"exc.{uuid.uuid4().hex[:8]}"
        [denied] = admin.create_topics([NewTopicSpec(late, 6, 1)])
        assert (denied.ok, denied.error) == (False, "POLICY_VIOLATION"), denied
        assert "[narrow]" in (denied.message or "")
        record = record_of(process, late)
        assert record["decision"] == "denied" and "waived" not in record
        assert datetime.fromisoformat(record["time"]) >= expires
        # Denied whole, the request never reached the broker: no topic, and the first is there.
        assert late not in broker.topics() and wide in broker.topics()
        samples = until(lambda: none_in_force(metrics()))
        expiry = ("kpp_policy_exception_expiry_seconds", frozenset({("exception", EXCEPTION)}))
        assert samples[expiry] <= 0
        assert reloads(samples) == 0  # no reload came between
    finally:
        admin.close()
