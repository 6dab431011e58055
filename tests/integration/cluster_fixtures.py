"""Integration fixtures: one real KRaft cluster and one proxy process per test session.

A plugin (registered in tests/conftest.py), so that tests/integration/ and tests/security/
share one cluster in one run instead of each starting its own on the same ports.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import REPO
from harness.local_kafka import LocalKafka
from harness.proxy_process import ProxyProcess

# Fixed ports stay below Linux's ephemeral range (32768-60999), where client sockets live.
# Brokers 29092-29094, SASL 29192-29194, controller 29292, SSL 29392-29394, SASL_SSL
# 29492-29494, SSL with client certificates 29592-29594.
CLUSTER_PORT_BASE = 29092
PROXY_BOOTSTRAP_PORT = 29400
PROXY_NODE_PORT_BASE = 29500  # node N is served on 29500 + N
ENFORCING_BOOTSTRAP_PORT = 29800
ENFORCING_NODE_PORT_BASE = 29900
TEST_POLICY = REPO / "tests" / "integration" / "data" / "policy.yaml"
LOG_KEEP_DIR = REPO / "test-logs"

_failed: list[str] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.failed:
        _failed.append(item.nodeid)
    return report


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    """A real 3-broker KRaft cluster (harness/local_kafka/); its logs are kept on failure."""
    cluster = LocalKafka(
        tmp_path_factory.mktemp("kafka") / "cluster",
        brokers=3,
        port_base=CLUSTER_PORT_BASE,
        light_jvm=True,
    )
    cluster.up(timeout=180)
    try:
        yield cluster
    finally:
        if _failed:
            _keep_logs(cluster.log_files(), "kafka")
        cluster.down()


@pytest.fixture(scope="session")
def proxy(kafka: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    """The proxy in front of the cluster, started as users start it."""
    process = ProxyProcess(
        tmp_path_factory.mktemp("proxy"),
        kafka.bootstrap_servers,
        PROXY_BOOTSTRAP_PORT,
        PROXY_NODE_PORT_BASE,
    )
    try:
        yield process
    finally:
        code = process.stop()
        if _failed:
            _keep_logs([process.log_path], "proxy")
        assert code == 0, f"proxy exited with {code} on SIGTERM"


@pytest.fixture(scope="session")
def enforcing_proxy(kafka: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    """A second proxy that enforces tests/integration/data/policy.yaml and writes an audit log."""
    workdir = tmp_path_factory.mktemp("enforcing")
    policy = workdir / "policy.yaml"
    shutil.copy(TEST_POLICY, policy)
    process = ProxyProcess(
        workdir,
        kafka.bootstrap_servers,
        ENFORCING_BOOTSTRAP_PORT,
        ENFORCING_NODE_PORT_BASE,
        extra={
            "policy": {"file": str(policy), "watch": True},
            "audit": {"file": str(workdir / "audit.jsonl")},
            "cluster_state": {"ttl_s": 1.0},
        },
    )
    process.policy_path = policy
    process.audit_path = workdir / "audit.jsonl"
    try:
        yield process
    finally:
        code = process.stop()
        if _failed:
            _keep_logs([process.log_path, process.audit_path], "enforcing")
        assert code == 0, f"enforcing proxy exited with {code} on SIGTERM"


def _keep_logs(files: list[Path], prefix: str) -> None:
    LOG_KEEP_DIR.mkdir(exist_ok=True)
    for path in files:
        if path.exists():
            shutil.copy(path, LOG_KEEP_DIR / f"{prefix}-{path.parent.name}-{path.name}")
