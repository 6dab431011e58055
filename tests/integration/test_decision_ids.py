"""The id at the end of a denial, as each admin client shows it, finds its record with
`kafka-policy-proxy audit show`; the brokers never saw the topic.

Runs on the shared cluster, through the enforcing proxy (tests/integration/data/policy.yaml).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cited import cited
from harness.proxy_process import ProxyProcess
from tests.integration.admin_clients import AdminHarness, BrokerView, NewTopicSpec
from tests.integration.enforcement_support import clients_with, uid

pytestmark = pytest.mark.integration

CLI = str(Path(sys.executable).parent / "kafka-policy-proxy")


@pytest.mark.parametrize("client", clients_with("create_topics"))
def test_a_denied_create_quotes_the_id_audit_show_finds(
    clients: dict[str, AdminHarness],
    broker: BrokerView,
    enforcing_proxy: ProxyProcess,
    client: str,
) -> None:
    name = f"Ids_{uid()}"  # upper case: the naming rule denies it
    [outcome] = clients[client].create_topics([NewTopicSpec(name, 1, 1)])
    assert (outcome.topic, outcome.error) == (name, "POLICY_VIOLATION"), outcome
    reason, decision_id = cited(outcome.message)
    assert reason.startswith(f"[naming] topic '{name}' does not match"), outcome.message
    assert enforcing_proxy.audit_path is not None
    shown = subprocess.run(
        [CLI, "audit", "show", decision_id, "--file", str(enforcing_proxy.audit_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    record = json.loads(shown.stdout)
    assert (record["decision_id"], record["topic"], record["decision"]) == (
        decision_id,
        name,
        "denied",
    )
    assert record["violations"][0]["rule"] == "naming"
    assert record["api"] == "CreateTopics" and record["action"] == "create"
    # The brokers were never asked: read from them directly, not through the proxy.
    assert broker.describe(name) is None and name not in broker.topics()
