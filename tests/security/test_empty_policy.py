"""A policy that enforces nothing cannot disarm the proxy, at start or at reload.

At start the proxy refuses it (exit 2, naming the `enforce: nothing` key). At reload it is
refused and the old policy stays: requests raced against the reloads are all judged by the old
policy (their audit records carry its revision), and the brokers, read directly after a
fence, have none of the topics the old policy denies.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from harness.proxy_process import ProxyProcess
from kafka_policy_proxy.policy.revision import policy_revision

pytestmark = pytest.mark.integration

REFUSED_START_PORT = 30440  # nodes on 30441 + N; bound only when `enforce: nothing` is set
BOOTSTRAP_PORT = 30450
NODE_PORT_BASE = 30460  # node N on 30460 + N
ATTACKERS = 3
ROUNDS = 2
GUARD = """\
version: 1
rules:
  - name: no-secdeny
    match: {topic_prefix: "secdeny."}
    deny: true
"""
# Each of these turns enforcement off if it is ever loaded.
DISARMING = {
    "empty file": "",
    "only a version": "version: 1\n",
    "no rules": "version: 1\nrules: []\nplugins: []\n",
    "every rule in audit mode": GUARD.replace("    deny: true", "    mode: audit\n    deny: true"),
    "dry run": "dry_run: true\n" + GUARD,
}


def run_proxy(workdir: Path, upstream: str, policy_text: str) -> subprocess.CompletedProcess[str]:
    """`kafka-policy-proxy run` with this policy, to its exit."""
    policy = workdir / "policy.yaml"
    policy.write_text(policy_text)
    config = workdir / "proxy.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "listeners": {
                    "bind_host": "127.0.0.1",
                    "bootstrap_port": REFUSED_START_PORT,
                    "broker_port_base": REFUSED_START_PORT + 1,
                },
                "upstream": {"bootstrap_servers": upstream.split(",")},
                "policy": {"file": str(policy)},
            }
        )
    )
    command = [str(Path(sys.executable).parent / "kafka-policy-proxy"), "run", "--config"]
    return subprocess.run(
        [*command, str(config)], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize("kind", sorted(DISARMING))
def test_the_proxy_refuses_to_start_on_a_policy_that_enforces_nothing(
    kafka: Any, tmp_path: Path, kind: str
) -> None:
    result = run_proxy(tmp_path, kafka.bootstrap_servers, DISARMING[kind])
    assert result.returncode == 2, result
    assert "this policy enforces nothing" in result.stderr
    assert "set `enforce: nothing` at the top level" in result.stderr
    # Saying so explicitly starts it.
    explicit = tmp_path / "explicit"
    explicit.mkdir()
    policy = explicit / "policy.yaml"
    policy.write_text("enforce: nothing\n" + DISARMING[kind])
    process = ProxyProcess(
        explicit,
        kafka.bootstrap_servers,
        REFUSED_START_PORT,
        REFUSED_START_PORT + 1,
        extra={"policy": {"file": str(policy)}},
    )
    assert process.stop() == 0


@pytest.fixture
def guarded(kafka: Any, tmp_path: Path) -> Iterator[ProxyProcess]:
    """A proxy enforcing GUARD, watching its file, with an audit log."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(GUARD)
    process = ProxyProcess(
        tmp_path,
        kafka.bootstrap_servers,
        BOOTSTRAP_PORT,
        NODE_PORT_BASE,
        extra={
            "policy": {"file": str(policy), "watch": True},
            "audit": {"file": str(tmp_path / "audit.jsonl")},
        },
    )
    process.policy_path = policy
    process.audit_path = tmp_path / "audit.jsonl"
    try:
        yield process
    finally:
        assert process.stop() == 0


@pytest.fixture(scope="module")
def direct(kafka: Any) -> AdminClient:
    """An admin client on the brokers themselves."""
    return AdminClient({"bootstrap.servers": kafka.bootstrap_servers, "log_level": 3})


def broker_topics_after_fence(direct: AdminClient) -> set[str]:
    """The brokers' topics once every change committed before the call is applied."""
    fence = f"fence.{uuid.uuid4().hex[:8]}"
    for future in direct.create_topics([NewTopic(fence, 1, 1)]).values():
        future.result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        topics = set(direct.list_topics(timeout=10).topics)
        if fence in topics:
            return topics
    raise AssertionError("the fence topic never showed up")


class Attackers:
    """Threads that create `secdeny.*` topics through the proxy until stopped."""

    def __init__(self, bootstrap: str) -> None:
        self.sent: list[str] = []
        self.answers: dict[str, str] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(bootstrap,), daemon=True)
            for _ in range(ATTACKERS)
        ]

    def __enter__(self) -> Attackers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(120)

    def _run(self, bootstrap: str) -> None:
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
        while not self._stop.is_set():
            name = f"secdeny.{uuid.uuid4().hex[:12]}"
            with self._lock:
                self.sent.append(name)
            try:
                admin.create_topics([NewTopic(name, 1, 1)])[name].result(60)
                answer = "created"
            except KafkaException as exc:
                answer = exc.args[0].name()
            with self._lock:
                self.answers[name] = answer


def wait_until(check: Any, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_reload_to_a_policy_that_enforces_nothing_is_refused_under_attack(
    guarded: ProxyProcess, direct: AdminClient
) -> None:
    assert guarded.policy_path is not None
    revision = policy_revision(GUARD)
    refusals = 0
    with Attackers(guarded.bootstrap) as attack:
        for _ in range(ROUNDS):
            for kind, text in DISARMING.items():
                guarded.policy_path.write_text(text)
                guarded.process.send_signal(signal.SIGHUP)
                refusals += 1
                assert wait_until(
                    lambda r=refusals: guarded.log_text().count("policy reload refused") >= r
                ), kind
                refusals = guarded.log_text().count("policy reload refused")
                # Requests keep arriving between the reloads.
                sent = len(attack.sent)
                assert wait_until(lambda s=sent: len(attack.answers) > s), kind
    assert guarded.alive()
    log = guarded.log_text()
    assert "this policy enforces nothing" in log and "policy loaded" in log
    assert log.count("policy loaded") == 1, "a disarming policy was loaded"

    # Every request was answered, denied, and judged by the guard's revision.
    assert len(attack.answers) == len(attack.sent) >= len(DISARMING) * ROUNDS
    assert set(attack.answers.values()) == {"POLICY_VIOLATION"}, attack.answers
    records = {e["topic"]: e for e in guarded.audit_events() if e["topic"] in attack.answers}
    assert set(records) == set(attack.answers)
    assert {(e["decision"], e["policy_revision"]) for e in records.values()} == {
        ("denied", revision)
    }
    assert not set(attack.sent) & broker_topics_after_fence(direct)

    # The file is still watched: a policy that enforces is loaded, and then decides.
    allowing = GUARD.replace('topic_prefix: "secdeny."', 'topic_prefix: "secnever."')
    guarded.policy_path.write_text(allowing)
    guarded.process.send_signal(signal.SIGHUP)
    assert wait_until(lambda: guarded.log_text().count("policy loaded") >= 2)
    probe = f"secdeny.{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": guarded.bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(probe, 1, 1)], validate_only=True)[probe].result(60)
