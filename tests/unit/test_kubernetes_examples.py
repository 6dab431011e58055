"""examples/kubernetes/ and the chart's workloads, as the container would see them.

The examples are the chart rendered by helm (harness/helm_chart.py): they must equal a fresh
render. For every proxy container of every workload: the argv Kubernetes gives it (the
Dockerfile's ENTRYPOINT and CMD, replaced by `command` and `args`) parses with the real CLI;
the pod's volumes, laid out in a directory as the kubelet would mount them, hold every file
the config names; and `kafka-policy-proxy config show` accepts that config with the
container's environment, as `run` would.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from harness.helm_chart import EXAMPLE_FILES, EXAMPLES, template
from harness.pod_layout import container_argv, environment, lay_out, proxy_containers, relocate
from kafka_policy_proxy.cli import build_parser
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.proxy.config import FILE_SUFFIX

CLI = str(Path(sys.executable).parent / "kafka-policy-proxy")
WORKLOADS = ["shared.yaml", "sidecar.yaml", "chart:full-values.yaml"]


@functools.cache  # read only: every test sees the same render
def _documents(source: str) -> list[dict[str, Any]]:
    if source.startswith("chart:"):
        text = template(source.removeprefix("chart:"), "kafka-policy-proxy", "kafka")
    else:
        text = (EXAMPLES / source).read_text()
    return [doc for doc in yaml.safe_load_all(text) if doc]


def _paths(data: dict[str, Any]) -> list[str]:
    found = []
    for key, value in data.items():
        if isinstance(value, dict):
            found += _paths(value)
        elif key == "file" or key.endswith(FILE_SUFFIX):
            found.append(value)
    return found


def _cases() -> list[tuple[str, int]]:
    return [
        (source, index)
        for source in WORKLOADS
        for index in range(len(proxy_containers(_documents(source))))
    ]


def test_the_examples_are_the_chart_rendered_fresh() -> None:
    for example in EXAMPLE_FILES:
        assert (EXAMPLES / example.file).read_text() == example.render(), (
            f"examples/kubernetes/{example.file} differs from the chart: make kubernetes-examples"
        )
    assert sorted(p.name for p in EXAMPLES.glob("*.yaml")) == sorted(e.file for e in EXAMPLE_FILES)


def test_every_workload_runs_the_proxy() -> None:
    assert [source for source, _ in _cases()] == WORKLOADS


@pytest.mark.parametrize(("source", "index"), _cases())
def test_the_container_argv_runs_the_proxy_with_its_mounted_config(
    source: str, index: int, tmp_path: Path
) -> None:
    docs = _documents(source)
    pod, container = proxy_containers(docs)[index]
    argv = container_argv(container)
    assert argv[0] == "kafka-policy-proxy", argv
    try:
        args = build_parser().parse_args(argv[1:])
    except SystemExit:  # argparse's exit 2: the container would crash-loop
        pytest.fail(f"the container's argv does not parse: {argv}")
    assert args.command == "run"
    kinds = lay_out(docs, pod, container, tmp_path)
    config_path = tmp_path / str(args.config).lstrip("/")
    assert config_path.is_file(), f"{args.config} is not in a ConfigMap the pod mounts"
    config = yaml.safe_load(config_path.read_text())
    for path in _paths(config):
        mount = str(PurePosixPath(path).parent)
        assert mount in kinds, f"{path} is not in any volume mounted in the proxy container"
        if kinds[mount] == "secret":  # its keys come from a Secret you create: a stand-in
            (tmp_path / path.lstrip("/")).write_text("from-a-secret\n")
        elif kinds[mount] == "configMap":
            assert (tmp_path / path.lstrip("/")).is_file(), f"{path}: not in its ConfigMap"
    config_path.write_text(relocate(config_path.read_text(), kinds, tmp_path))
    env = environment(container, "from-the-downward-api")
    done = subprocess.run(
        [CLI, "config", "show", "--config", str(config_path)],
        check=False,
        capture_output=True,
        text=True,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("KPP_")}, **env},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "proxy_id: from-the-downward-api  # env KPP_AUDIT__PROXY_ID" in done.stdout


@pytest.mark.parametrize(("source", "index"), _cases())
def test_probes_ports_and_drain_fit_the_config(source: str, index: int) -> None:
    docs = _documents(source)
    pod, proxy = proxy_containers(docs)[index]
    (config_map,) = [d for d in docs if d["metadata"]["name"].endswith("-config")]
    config = yaml.safe_load(config_map["data"]["proxy.yaml"])
    (admin,) = [p for p in proxy["ports"] if p["name"] == "admin"]
    assert admin["containerPort"] == config["admin"]["port"]
    # The kubelet and Prometheus dial the pod address, not loopback.
    assert config["admin"]["bind_host"] == "0.0.0.0"
    assert proxy["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "admin"}
    assert proxy["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "admin"}
    # SIGTERM comes after the preStop sleep, then drains for shutdown_timeout_s.
    drain = proxy["lifecycle"]["preStop"]["sleep"]["seconds"] + config["shutdown_timeout_s"]
    assert pod["terminationGracePeriodSeconds"] > drain
    assert pod["securityContext"]["runAsNonRoot"]
    assert proxy["securityContext"]["readOnlyRootFilesystem"]
    if proxy.get("restartPolicy") == "Always":  # a sidecar: the application dials loopback
        assert config["listeners"]["bind_host"] == "127.0.0.1"
        return
    listeners = config["listeners"]
    (service,) = [d for d in docs if d["kind"] == "Service"]
    published = {p["port"]: p["targetPort"] for p in service["spec"]["ports"]}
    served = {p["name"]: p["containerPort"] for p in proxy["ports"]}
    assert published[listeners["bootstrap_port"]] == "bootstrap"
    for port, name in published.items():
        assert served[name] == port  # the Service maps each port to the same container port
    if "sni" in listeners:  # the SNI port: bootstrap and every broker, by host name
        assert published[int(listeners["sni"]["bootstrap_address"].rpartition(":")[2])] == "sni"
    brokers = {port: name for port, name in published.items() if name.startswith("broker-")}
    assert brokers  # node id N on broker_port_base + N
    for port, name in brokers.items():
        assert port == listeners["broker_port_base"] + int(name.removeprefix("broker-"))
    namespace = "kafka"
    assert listeners["advertised_host"] == f"{service['metadata']['name']}.{namespace}.svc"


def test_the_policy_config_maps_load() -> None:
    for source in ("shared.yaml", "sidecar.yaml"):
        (policy_map,) = [d for d in _documents(source) if d["metadata"]["name"].endswith("-policy")]
        policy = load_policy(policy_map["data"]["policy.yaml"], source)
        assert len(policy.rule_names) >= 5
        policy.close()
