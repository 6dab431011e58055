"""The admin listener against the real cluster: counters move by what real clients did, and
the probes say whether the proxy can take traffic."""

from __future__ import annotations

import signal
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from harness.proxy_process import ProxyProcess
from tests.integration.admin_clients import BrokerView, ConfigOp, ConfluentAdmin, NewTopicSpec
from tests.integration.test_admin_clients import until

pytestmark = pytest.mark.integration

BOOTSTRAP_PORT, NODE_PORT_BASE, ADMIN_PORT = 32400, 32500, 32491
POLICY = """\
version: 1
rules:
  - name: no-scratch
    match: {topic_prefix: scratch.}
    deny: true
    message: scratch topics are not allowed
  - name: cleanup-immutable
    configs:
      cleanup.policy: {immutable: true}
"""
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int = ADMIN_PORT) -> Samples:
    """Every sample of /metrics, keyed by name and labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value (0 if absent: a counter not yet incremented)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum over every sample of `name` whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


def probe(path: str, port: int = ADMIN_PORT) -> tuple[int, str]:
    """GET a probe: status and body."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as failed:
        return failed.code, failed.read().decode()


@pytest.fixture(scope="module")
def proxy(kafka: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    """An enforcing proxy with an audit file and the admin listener."""
    workdir = tmp_path_factory.mktemp("metrics")
    (workdir / "policy.yaml").write_text(POLICY)
    process = ProxyProcess(
        workdir,
        kafka.bootstrap_servers,
        BOOTSTRAP_PORT,
        NODE_PORT_BASE,
        extra={
            "policy": {"file": str(workdir / "policy.yaml"), "watch": False},
            "audit": {"file": str(workdir / "audit.jsonl")},
            "admin": {"bind_host": "127.0.0.1", "port": ADMIN_PORT},
            # Long enough that an entry cannot expire between two requests of one test.
            "cluster_state": {"ttl_s": 60},
        },
    )
    process.policy_path = workdir / "policy.yaml"
    process.audit_path = workdir / "audit.jsonl"
    try:
        yield process
    finally:
        assert process.stop() == 0


def test_counters_move_by_what_clients_did(proxy: ProxyProcess, kafka: Any) -> None:
    admin = ConfluentAdmin(proxy.bootstrap)
    admin.create_topics([NewTopicSpec("orders.warmup", 1, 1)])  # connections, metadata
    before = scrape()
    outcomes = admin.create_topics(
        [NewTopicSpec("orders.metrics", 3, 3), NewTopicSpec("scratch.metrics", 3, 3)]
    )
    assert [o.ok for o in outcomes] == [True, False]
    until(lambda: BrokerView(kafka.bootstrap_servers).describe("orders.metrics"))
    producer = Producer({"bootstrap.servers": proxy.bootstrap, "log_level": 3})
    for i in range(10):
        producer.produce("orders.metrics", b"x" * 1000, key=str(i).encode())
    assert producer.flush(30) == 0
    admin.close()
    after = scrape()

    def moved(name: str, **labels: str) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    assert moved("kpp_requests_total", api="CreateTopics") == 1
    assert moved("kpp_decisions_total", api="CreateTopics", decision="allowed", rule="") == 1
    denied = {"api": "CreateTopics", "action": "create", "decision": "denied", "rule": "no-scratch"}
    assert moved("kpp_decisions_total", **denied) == 1
    assert moved("kpp_requests_total", api="Produce") >= 1
    assert moved("kpp_bytes_total", direction="client_to_broker") > 10 * 1000
    assert moved("kpp_bytes_total", direction="broker_to_client") > 0
    assert moved("kpp_added_latency_seconds_count", api="CreateTopics") == 1
    # The allowed topic needed the broker defaults: read now, or still cached from the warmup.
    assert moved("kpp_cluster_state_requests_total", result="error") == 0
    assert moved("kpp_cluster_state_requests_total") >= 1
    assert moved("kpp_audit_events_total", sink="file", result="written") == 2
    assert len([e for e in proxy.audit_events() if e["topic"].endswith(".metrics")]) == 2
    assert moved("kpp_connections_total") >= 2  # bootstrap + a node, for the producer
    assert total(before, "kpp_connections_open") >= 1  # the admin client was connected then
    assert value(after, "kpp_upstream_connect_failures_total", listener="bootstrap") == 0


def test_a_decision_after_an_accepted_config_change_reads_it_fresh_from_the_cluster(
    proxy: ProxyProcess, kafka: Any
) -> None:
    topic = "orders.cached"
    direct = BrokerView(kafka.bootstrap_servers)
    admin = ConfluentAdmin(proxy.bootstrap)
    assert [o.ok for o in admin.create_topics([NewTopicSpec(topic, 1, 1)])] == [True]
    until(lambda: direct.describe(topic))
    first = admin.incremental_alter_configs({topic: [ConfigOp("retention.ms", "SET", "7200000")]})
    before = scrape()
    second = admin.incremental_alter_configs({topic: [ConfigOp("retention.ms", "SET", "10800000")]})
    after = scrape()
    admin.close()
    assert [o.ok for o in first + second] == [True, True]
    # A mutation is judged on facts read after it arrived, not on what the proxy cached from
    # the first change (another proxy may have changed the topic since): the second decision
    # read the cluster, and saw the first change there.
    assert total(after, "kpp_cluster_state_requests_total", result="miss") > total(
        before, "kpp_cluster_state_requests_total", result="miss"
    )
    [_, judged] = [e for e in proxy.audit_events() if e["topic"] == topic and e["api_key"] == 44]
    current = judged["request"]["current"]
    assert current["configs"]["retention.ms"] == "7200000"
    assert "retention.ms" in current["overrides"]
    # And the broker holds what the second change set.
    until(lambda: direct.describe(topic).configs["retention.ms"].value == "10800000")


def test_reloads_and_the_live_revision(proxy: ProxyProcess) -> None:
    assert proxy.policy_path is not None
    first = scrape()
    [old] = [dict(ls)["revision"] for (n, ls), v in first.items() if n == "kpp_policy_info"]
    proxy.policy_path.write_text(POLICY.replace("scratch topics", "scratch topics here"))
    proxy.process.send_signal(signal.SIGHUP)
    until(lambda: value(scrape(), "kpp_policy_reloads_total", result="ok") or None)
    proxy.policy_path.write_text("rules: [")
    proxy.process.send_signal(signal.SIGHUP)
    until(lambda: value(scrape(), "kpp_policy_reloads_total", result="failed") or None)
    after = scrape()
    live = {dict(ls)["revision"]: v for (n, ls), v in after.items() if n == "kpp_policy_info"}
    assert list(live.values()) == [1.0]
    assert old not in live  # the good reload replaced it; the bad one changed nothing
    assert f'"revision": "{next(iter(live))}"' in proxy.log_text()


def test_probes_of_a_serving_proxy(proxy: ProxyProcess) -> None:
    assert probe("/healthz") == (200, "ok\n")
    assert until(lambda: probe("/readyz") if probe("/readyz")[0] == 200 else None) == (
        200,
        "ready\n",
    )
    assert probe("/nothing")[0] == 404


def test_readyz_names_an_unreachable_cluster(kafka: Any, tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(POLICY)
    dead = ProxyProcess(
        tmp_path,
        "127.0.0.1:1",  # nothing listens there
        32450,
        32460,
        extra={
            "policy": {"file": str(tmp_path / "policy.yaml")},
            "admin": {"bind_host": "127.0.0.1", "port": 32492},
            "upstream": {"bootstrap_servers": ["127.0.0.1:1"], "connect_timeout_s": 1},
        },
    )
    try:
        assert probe("/healthz", 32492) == (200, "ok\n")

        def refused() -> tuple[int, str] | None:
            answer = probe("/readyz", 32492)
            return answer if "127.0.0.1:1" in answer[1] else None

        status, body = until(refused)
        assert status == 503
        assert "the cluster state was not read in the last 60s" in body
        assert "127.0.0.1:1" in body
    finally:
        assert dead.stop() == 0
