"""The chart's shared proxy, run as its pod would run it, in front of the real cluster.

The chart is rendered by helm with ci/shared-values.yaml, pointed at the local cluster
(plaintext, no SASL: those need Secrets and a TLS cluster); its ConfigMaps are laid out as the
kubelet mounts them; the container's argv (the Dockerfile's ENTRYPOINT with the container's
args) and environment start the proxy. Clients then go through the ports the Service publishes:
the policy the chart ships denies a create and admits another, which the brokers confirm.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.helm_chart import template
from harness.pod_layout import container_argv, environment, lay_out, proxy_containers, relocate
from tests.integration.admin_clients import BrokerView, ConfluentAdmin, NewTopicSpec
from tests.integration.test_admin_clients import until

pytestmark = pytest.mark.integration

# The chart part's port range (18550-18599): bootstrap, admin, node N on 18560 + N.
BOOTSTRAP_PORT, ADMIN_PORT, NODE_PORT_BASE = 18550, 18551, 18560
POD_NAME = "kafka-policy-proxy-5d9c7b6f4-x2k8q"
CLI = str(Path(sys.executable).parent / "kafka-policy-proxy")


def _ready(timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ADMIN_PORT}/readyz", timeout=5):
                return
        except (urllib.error.URLError, ConnectionError) as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"/readyz never answered 200: {exc}") from None
            time.sleep(0.2)


@pytest.fixture(scope="module")
def pod(kafka: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[str]]]:
    """The proxy started from the rendered pod: (its log, with the audit on stdout; its argv)."""
    root = tmp_path_factory.mktemp("chart-pod")
    local = root / "local-values.yaml"
    local.write_text(
        yaml.safe_dump(
            {
                "upstream": {
                    "bootstrapServers": kafka.bootstrap_servers.split(","),
                    "tls": {"enabled": False},
                },
                "clusterState": {"sasl": {"mechanism": ""}},
                "audit": {"kafka": {"enabled": False}},
                "listeners": {
                    "advertisedHost": "127.0.0.1",
                    "bootstrapPort": BOOTSTRAP_PORT,
                    "brokerPortBase": NODE_PORT_BASE,
                    "brokerIds": sorted(kafka.broker_addresses),
                },
                "admin": {"port": ADMIN_PORT},
            }
        )
    )
    rendered = template(
        "shared-values.yaml", "kafka-policy-proxy", "kafka", extra=("-f", str(local))
    )
    docs = [doc for doc in yaml.safe_load_all(rendered) if doc]
    ((spec, container),) = proxy_containers(docs)
    mounts = lay_out(docs, spec, container, root)
    argv = container_argv(container)
    at = argv.index("--config") + 1
    config = root / argv[at].lstrip("/")
    config.write_text(relocate(config.read_text(), mounts, root))
    argv[at] = str(config)
    log_path = root / "pod.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KPP_")}
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [CLI, *argv[1:]],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**env, **environment(container, POD_NAME)},
        )
    try:
        _ready()
        yield log_path, argv
    finally:
        process.send_signal(signal.SIGTERM)  # what the kubelet sends after the preStop sleep
        code = process.wait(60)
        assert code == 0, f"exit {code} on SIGTERM:\n{log_path.read_text()[-4000:]}"


def _audit(log: Path, topic: str) -> list[dict[str, Any]]:
    events = []
    for line in log.read_text().splitlines():
        if line.startswith("{") and '"event":"decision"' in line.replace(" ", ""):
            event = json.loads(line)
            if event.get("topic") == topic:
                events.append(event)
    return events


def test_the_pod_argv_is_the_image_entrypoint_with_the_chart_args(
    pod: tuple[Path, list[str]],
) -> None:
    _, argv = pod
    assert argv[:3] == ["kafka-policy-proxy", "run", "--config"]


def test_the_chart_policy_denies_and_admits_through_the_published_ports(
    kafka: Any, pod: tuple[Path, list[str]]
) -> None:
    log, _ = pod
    admin = ConfluentAdmin(f"127.0.0.1:{BOOTSTRAP_PORT}")
    broker = BrokerView(kafka.bootstrap_servers)
    good, bad = "orders.chart-check", "Chart_Check"
    durable = {"min.insync.replicas": "2"}
    try:
        (denied,) = admin.create_topics([NewTopicSpec(bad, 3, 3, configs=durable)])
        (allowed,) = admin.create_topics([NewTopicSpec(good, 3, 3, configs=durable)])
        assert not denied.ok and denied.error == "POLICY_VIOLATION", denied
        assert "topic-naming" in (denied.message or "")
        assert allowed.ok, allowed
        # The brokers, read directly (once the new topic's metadata reaches the one asked):
        # one topic made, the other never.
        info = until(lambda: broker.describe(good))
        assert info is not None and len(info.partitions) == 3
        assert bad not in broker.topics()
        # The audit record on stdout names the pod (KPP_AUDIT__PROXY_ID from the downward API)
        # and the worker (the chart runs `workers: 2`).
        (event,) = _audit(log, bad)
        assert event["decision"] == "denied"
        assert event["proxy_id"] in {f"{POD_NAME}/worker-1", f"{POD_NAME}/worker-2"}
    finally:
        admin.close()
        direct = ConfluentAdmin(kafka.bootstrap_servers)  # the policy lets no one else delete
        direct.delete_topics([good])
        direct.close()
