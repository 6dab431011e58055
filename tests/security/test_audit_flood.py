"""The audit trail survives a flood, through the real proxy in front of the real cluster.

alice creates a few topics (the history); bob then floods the proxy with denied batches of
100 topics (one record each) and of 2,000 (one summary record each). The proxy's audit file is
small (64 KiB, 2 backups), so a plain size-rotated file would lose alice's history within a
few batches. It must still be there afterwards; bob, once over his audit budget, is refused
even a create the policy allows (and the brokers show none of his topics); alice's create
after the flood is still allowed and audited. The audit files are read, not the proxy's word.
"""

from __future__ import annotations

import json
import re
import shutil
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from harness.proxy_process import ProxyProcess
from tests.integration.admin_clients import BrokerView
from tests.integration.cluster_fixtures import TEST_POLICY

pytestmark = pytest.mark.integration

BOOTSTRAP_PORT, NODE_PORT_BASE, ADMIN_PORT = 31800, 31810, 31820
KIB = 1024
MAX_BYTES = 64 * KIB
BACKUPS = 2
BUDGET = 256 * KIB  # bob's per minute: more than the rotation holds (3 x 64 KiB)
MAX_TOTAL = 2048 * KIB
POLICY_VIOLATION = 44


@pytest.fixture(scope="module")
def proxy(kafka: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    """In front of the SASL listener (principals alice and bob), with a small audit file."""
    workdir = tmp_path_factory.mktemp("audit-flood")
    policy = workdir / "policy.yaml"
    shutil.copy(TEST_POLICY, policy)
    audit = workdir / "audit.jsonl"
    process = ProxyProcess(
        workdir,
        kafka.sasl_bootstrap_servers,
        BOOTSTRAP_PORT,
        NODE_PORT_BASE,
        extra={
            "policy": {"file": str(policy), "watch": False},
            "audit": {
                "file": str(audit),
                "max_bytes": MAX_BYTES,
                "backups": BACKUPS,
                "min_retention_s": 3600,
                "max_total_bytes": MAX_TOTAL,
                "principal_budget_bytes_per_minute": BUDGET,
                "on_failure": "closed",
            },
            # Only the audit budget stops bob here, not the rate of entries.
            "admission": {"entries_per_second": 1e9, "burst": 10**9},
            "admin": {"bind_host": "127.0.0.1", "port": ADMIN_PORT},
            "cluster_state": {
                "sasl": {"mechanism": "PLAIN", "username": "admin", "password": "admin-secret"}
            },
        },
    )
    process.audit_path = audit
    yield process
    assert process.stop() == 0


def admin(user: str) -> AdminClient:
    """confluent-kafka's AdminClient through the proxy, logged in as `user` (SASL PLAIN)."""
    return AdminClient(
        {
            "bootstrap.servers": f"127.0.0.1:{BOOTSTRAP_PORT}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": user,
            "sasl.password": f"{user}-secret",
            "log_level": 3,
        }
    )


def create(client: AdminClient, names: list[str], partitions: int) -> dict[str, int]:
    """Create the topics; each name's Kafka error code (0: created)."""
    return {name: code for name, (code, _) in answers(client, names, partitions).items()}


def answers(client: AdminClient, names: list[str], partitions: int) -> dict[str, tuple[int, str]]:
    """Create the topics; each name's Kafka error code (0: created) and message."""
    futures = client.create_topics(
        [NewTopic(n, partitions, 1) for n in names], request_timeout=120, operation_timeout=60
    )
    found = {}
    for name, future in futures.items():
        try:
            future.result()
            found[name] = (0, "")
        except KafkaException as exc:
            found[name] = (exc.args[0].code(), exc.args[0].str())
    return found


def audit_records(audit: Path) -> list[dict[str, Any]]:
    """Every record in the audit file and its backups."""
    files = [audit.with_name(f"{audit.name}.{i}") for i in range(BACKUPS, 0, -1)] + [audit]
    return [json.loads(line) for f in files if f.exists() for line in f.read_text().splitlines()]


def metric(name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{ADMIN_PORT}/metrics", timeout=10).read()
    found = re.search(rf"^{name} ([0-9.e+]+)$".encode(), text, re.MULTILINE)
    return 0.0 if found is None else float(found.group(1))


def test_the_history_survives_a_flood_and_the_flooder_is_refused_once_over_budget(
    proxy: ProxyProcess, kafka: Any
) -> None:
    assert proxy.audit_path is not None
    run = uuid.uuid4().hex[:8]
    alice, bob = admin("alice"), admin("bob")
    history = [f"alice.history-{run}-{i}" for i in range(3)]
    assert create(alice, history, 1) == dict.fromkeys(history, 0)
    before = {r["topic"] for r in audit_records(proxy.audit_path)}
    assert set(history) <= before
    # The flood: denied batches (partition-bounds allows at most 6), per-topic records first,
    # then summaries, until bob is refused for his audit budget.
    batches = 0
    while True:
        size = 100 if batches < 4 else 2000
        names = [f"flood.b{run}-{batches}-{i}" for i in range(size)]
        found = answers(bob, names, 50)
        batches += 1
        assert {code for code, _ in found.values()} == {POLICY_VIOLATION}
        if "audit.principal_budget_bytes_per_minute" in found[names[0]][1]:
            break
        assert batches < 200, "bob was never refused for his audit budget"
    flood = [r for r in audit_records(proxy.audit_path) if r["principal"] == "User:bob"]
    assert len(flood) >= 100  # bob's flood is on record too, up to his budget
    assert metric("kpp_audit_rotation_pressure_total") >= 1
    assert "audit rotation under pressure" in proxy.log_text()
    # Over budget, bob is refused even a create the policy allows, and nothing reaches a broker.
    allowed_for_bob = f"flood.ok-{run}"
    assert create(bob, [allowed_for_bob], 1) == {allowed_for_bob: POLICY_VIOLATION}
    assert metric("kpp_audit_budget_denials_total") >= 2
    on_brokers = BrokerView(kafka.bootstrap_servers).topics()
    assert not [t for t in on_brokers if t.startswith(("flood.b" + run, allowed_for_bob))]
    # alice's history is still on disk, and her create now is allowed and recorded.
    after = audit_records(proxy.audit_path)
    assert set(history) <= {r["topic"] for r in after}
    later = f"alice.later-{run}"
    assert create(alice, [later], 1) == {later: 0}
    deadline = time.monotonic() + 10
    while later not in {r["topic"] for r in audit_records(proxy.audit_path)}:
        assert time.monotonic() < deadline, "alice's create after the flood is not audited"
        time.sleep(0.2)
    # Bounded disk: every audit file together within audit.max_total_bytes.
    files = proxy.audit_path.parent.glob(proxy.audit_path.name + "*")
    assert sum(f.stat().st_size for f in files) <= MAX_TOTAL
    direct = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    for future in direct.delete_topics([*history, later]).values():
        future.result()
