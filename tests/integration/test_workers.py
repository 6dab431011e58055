"""`--workers 2` against the real cluster: connections spread over both workers, metrics add up,
SIGHUP reaches every worker, a killed worker is replaced, and SIGTERM drains them all."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from harness.proxy_process import ProxyProcess
from tests.integration.admin_clients import ConfluentAdmin, NewTopicSpec
from tests.integration.test_admin_clients import until
from tests.integration.test_metrics import probe, scrape, total

pytestmark = pytest.mark.integration

BOOTSTRAP_PORT, NODE_PORT_BASE, ADMIN_PORT = 32600, 32610, 32620
CONNECTIONS = 16  # all on one worker by chance: 2 in 2**16
POLICY = """\
version: 1
rules:
  - name: no-scratch
    match: {topic_prefix: scratch.}
    deny: true
    message: "{marker}"
"""


@pytest.fixture(scope="module")
def proxy(kafka: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    """The proxy with two workers, an audit file and the admin listener."""
    workdir = tmp_path_factory.mktemp("workers")
    policy = workdir / "policy.yaml"
    policy.write_text(POLICY.replace("{marker}", "first policy"))
    process = ProxyProcess(
        workdir,
        kafka.bootstrap_servers,
        BOOTSTRAP_PORT,
        NODE_PORT_BASE,
        extra={
            "workers": 2,
            "policy": {"file": str(policy), "watch": False},
            "audit": {"file": str(workdir / "audit.jsonl")},
            "admin": {"bind_host": "127.0.0.1", "port": ADMIN_PORT},
        },
    )
    process.policy_path = policy
    process.audit_path = workdir / "audit.jsonl"
    yield process
    if process.alive():
        process.stop()


def workers(proxy: ProxyProcess) -> list[int]:
    """The supervisor's child processes."""
    found = subprocess.run(
        ["pgrep", "-P", str(proxy.process.pid)], capture_output=True, text=True, check=False
    )
    return sorted(int(pid) for pid in found.stdout.split())


def ready() -> tuple[int, str] | None:
    """The supervisor's /readyz once it answers 200."""
    answer = probe("/readyz", ADMIN_PORT)
    return answer if answer[0] == 200 else None


def deny_once_per_connection(proxy: ProxyProcess, prefix: str) -> list[str]:
    """One denied CreateTopics on each of CONNECTIONS new connections; the messages."""
    messages = []
    for i in range(CONNECTIONS):
        admin = ConfluentAdmin(proxy.bootstrap)
        try:
            [outcome] = admin.create_topics([NewTopicSpec(f"scratch.{prefix}-{i}", 1, 1)])
        finally:
            admin.close()
        assert outcome.error == "POLICY_VIOLATION", outcome
        messages.append(outcome.message or "")
    return messages


def audit_lines(proxy: ProxyProcess) -> dict[str, list[dict[str, Any]]]:
    """Each worker's audit file, parsed."""
    assert proxy.audit_path is not None
    return {
        path.name: [json.loads(line) for line in path.read_text().splitlines()]
        for path in sorted(proxy.audit_path.parent.glob("audit.worker-*.jsonl"))
    }


def test_two_workers_share_the_port_and_their_metrics_add_up(proxy: ProxyProcess) -> None:
    assert len(workers(proxy)) == 2
    until(ready)
    deny_once_per_connection(proxy, "spread")
    files = audit_lines(proxy)
    assert sorted(files) == ["audit.worker-1.jsonl", "audit.worker-2.jsonl"]
    assert all(files.values()), {name: len(lines) for name, lines in files.items()}
    proxy_ids = {name: {e["proxy_id"] for e in lines} for name, lines in files.items()}
    assert all(len(ids) == 1 for ids in proxy_ids.values())
    assert proxy_ids["audit.worker-1.jsonl"] != proxy_ids["audit.worker-2.jsonl"]
    denied = sum(len(lines) for lines in files.values())
    assert denied == CONNECTIONS
    decisions = total(
        scrape(ADMIN_PORT), "kpp_decisions_total", decision="denied", rule="no-scratch"
    )
    assert decisions == CONNECTIONS


def test_sighup_reloads_every_worker(proxy: ProxyProcess) -> None:
    assert proxy.policy_path is not None
    proxy.policy_path.write_text(POLICY.replace("{marker}", "second policy"))
    proxy.process.send_signal(signal.SIGHUP)
    until(lambda: total(scrape(ADMIN_PORT), "kpp_policy_reloads_total", result="ok") == 2 or None)
    messages = deny_once_per_connection(proxy, "reloaded")
    assert all("second policy" in m for m in messages), messages
    files = audit_lines(proxy)
    assert all(any(e["topic"].startswith("scratch.reloaded") for e in f) for f in files.values())


def test_a_killed_worker_is_replaced(proxy: ProxyProcess) -> None:
    before = workers(proxy)
    os.kill(before[0], signal.SIGKILL)

    def replaced() -> list[int] | None:
        now = workers(proxy)
        return now if len(now) == 2 and before[0] not in now else None

    until(replaced)
    assert "worker died; restarting it" in proxy.log_text()
    until(ready)
    deny_once_per_connection(proxy, "after-restart")


def test_a_worker_killed_while_the_policy_file_is_refused_comes_back_with_the_last_good_one(
    proxy: ProxyProcess,
) -> None:
    # Found by the soak: the replacement used to exit on the refused file, and the
    # supervisor then stopped every worker.
    assert proxy.policy_path is not None
    good = proxy.policy_path.read_text()
    proxy.policy_path.write_text("rules: [{name: broken\n")
    proxy.process.send_signal(signal.SIGHUP)
    until(
        lambda: total(scrape(ADMIN_PORT), "kpp_policy_reloads_total", result="failed") >= 2 or None
    )
    before = workers(proxy)
    os.kill(before[1], signal.SIGKILL)
    until(lambda: ((now := workers(proxy)) and len(now) == 2 and before[1] not in now) or None)
    until(lambda: "running the last policy the workers loaded" in proxy.log_text() or None)
    until(ready)
    assert proxy.process.poll() is None
    messages = deny_once_per_connection(proxy, "last-good")
    assert all("second policy" in m for m in messages), messages
    proxy.policy_path.write_text(good)


def test_sigterm_drains_every_worker(proxy: ProxyProcess) -> None:
    children = workers(proxy)
    assert proxy.stop() == 0
    assert proxy.log_text().count('"event": "stopped"') >= 2
    assert children and not any(os.path.exists(f"/proc/{pid}") for pid in children)
