"""The Helm chart, checked by the real helm and the Kubernetes API's schemas.

For each values file in charts/kafka-policy-proxy/ci/: `helm lint --strict`, `helm template`,
and every rendered manifest validated against the Kubernetes schema (PodMonitor and
PrometheusRule against the Prometheus Operator's CRDs). The proxy's own view of what it
renders (argv and config) is in test_chart_containers.py.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY

import kafka_policy_proxy.proxy.metrics  # noqa: F401  (registers every metric)
from harness.helm_chart import CHART, KUBE_VERSION, ROOT, VALUES, helm, run_helm, template
from harness.kube_schema import validate
from harness.promql import parse_errors

VALUE_FILES = sorted(path.name for path in VALUES.glob("*.yaml"))
# The oldest Kubernetes the chart supports, and the newest schema there is.
KUBE_VERSIONS = [KUBE_VERSION, "1.37.0"]


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    """Each values file's manifests, rendered once for the module."""
    return {
        name: [d for d in yaml.safe_load_all(template(name, "kafka-policy-proxy", "kafka")) if d]
        for name in VALUE_FILES
    }


def _kinds(docs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for doc in docs:
        found.setdefault(doc["kind"], []).append(doc)
    return found


def test_the_values_files_cover_both_shapes_and_everything_on() -> None:
    assert VALUE_FILES == ["full-values.yaml", "shared-values.yaml", "sidecar-values.yaml"]


@pytest.mark.parametrize("values", VALUE_FILES)
def test_helm_lint_passes(values: str) -> None:
    done = run_helm("lint", "--strict", str(CHART), "-f", str(VALUES / values))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("values", VALUE_FILES)
def test_every_manifest_validates_against_the_kubernetes_schema(
    rendered: dict[str, list[dict[str, Any]]], values: str, kube_version: str
) -> None:
    docs = rendered[values]
    assert docs
    errors = {f"{d['kind']}/{d['metadata']['name']}": validate(d, kube_version) for d in docs}
    assert {name: e for name, e in errors.items() if e} == {}


def test_the_schema_check_refuses_a_field_kubernetes_does_not_have() -> None:
    # The validators above would pass anything if they were lenient; prove they are not.
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
    pod["spec"] = {"containers": [{"name": "c", "image": "i", "arg": ["run"]}]}
    assert validate(pod, KUBE_VERSION)
    monitor = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor"}
    monitor |= {"metadata": {"name": "m"}, "spec": {"podMetricEndpoints": [{"port": "admin"}]}}
    assert validate(monitor, KUBE_VERSION)


def test_shapes_render_the_objects_they_promise(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    shared = _kinds(rendered["shared-values.yaml"])
    assert sorted(shared) == ["ConfigMap", "Deployment", "PodDisruptionBudget", "Service"]
    assert len(shared["ConfigMap"]) == 2  # the config and the policy
    (pod,) = [d["spec"]["template"]["spec"] for d in shared["Deployment"]]
    assert pod["automountServiceAccountToken"] is False  # it never calls the Kubernetes API
    (spread,) = pod["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    sidecar = _kinds(rendered["sidecar-values.yaml"])
    assert sorted(sidecar) == ["ConfigMap", "Deployment", "NetworkPolicy"]
    # Only the brokers' policy: one for the proxy would select the application's pods.
    (brokers,) = sidecar["NetworkPolicy"]
    assert brokers["metadata"]["name"].endswith("-brokers")
    (pod,) = [d["spec"]["template"]["spec"] for d in sidecar["Deployment"]]
    (proxy,) = pod["initContainers"]
    assert proxy["restartPolicy"] == "Always"  # a native sidecar, up before the application
    (app,) = pod["containers"]
    assert {"name": "KAFKA_BOOTSTRAP_SERVERS", "value": "127.0.0.1:9192"} in app["env"]
    full = _kinds(rendered["full-values.yaml"])
    assert len(full["NetworkPolicy"]) == 2 and full["PodMonitor"] and full["PrometheusRule"]
    assert len(full["ConfigMap"]) == 1  # policy.existingConfigMap: the policy is not ours


def test_monitoring_and_network_policies_are_off_by_default(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    # The CRDs may not exist, and a NetworkPolicy in the brokers' namespace needs consent.
    defaults = [d for d in yaml.safe_load_all(_template_defaults()) if d]
    kinds = {d["kind"] for d in defaults}
    assert not kinds & {"PodMonitor", "PrometheusRule", "NetworkPolicy"}
    (deployment,) = [d for d in defaults if d["kind"] == "Deployment"]
    assert deployment["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"]


def _template_defaults() -> str:
    done = run_helm("template", "kafka-policy-proxy", str(CHART), "--kube-version", KUBE_VERSION)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize(
    ("setting", "key"),
    [
        ("mode=daemonset", "mode"),
        ("listeners.bootstrapPort=70000", "bootstrapPort"),
        ("upstream.tls.verify=false", "verify"),
        ("clusterState.sasl.mechanism=GSSAPI", "mechanism"),
        ("workers=0", "workers"),
        ("service.type=ExternalName", "service"),
    ],
)
def test_values_the_schema_refuses_name_their_key(setting: str, key: str) -> None:
    done = run_helm("template", "x", str(CHART), "--kube-version", KUBE_VERSION, "--set", setting)
    assert done.returncode != 0
    assert key in done.stderr, done.stderr


def test_a_grace_period_shorter_than_the_drain_is_refused() -> None:
    done = run_helm(
        "template", "x", str(CHART), "--kube-version", KUBE_VERSION,
        "--set", "terminationGracePeriodSeconds=30",
    )  # fmt: skip
    assert done.returncode != 0
    assert "terminationGracePeriodSeconds must be at least" in done.stderr


def test_sni_without_a_listener_certificate_is_refused() -> None:
    sni = "listeners.sni.bootstrapAddress=kafka.example.com:9443,"
    sni += "listeners.sni.advertisedBrokerAddressPattern=broker-$(nodeId).kafka.example.com"
    done = run_helm("template", "x", str(CHART), "--kube-version", KUBE_VERSION, "--set", sni)
    assert done.returncode != 0
    assert "listeners.sni needs listeners.tls.secretName" in done.stderr


def test_client_properties_point_the_proxy_at_the_mounted_file(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    kinds = _kinds(rendered["full-values.yaml"])
    (config_map,) = kinds["ConfigMap"]
    config = yaml.safe_load(config_map["data"]["proxy.yaml"])
    assert (
        config["upstream"]["client_properties"]
        == "/etc/kafka-policy-proxy/client/client.properties"
    )
    assert "tls" not in config["upstream"] and "cluster_state" in config  # no sasl either
    assert "sasl" not in config["cluster_state"]
    (deployment,) = kinds["Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "kpp-client"]
    assert volume["secret"] == {"secretName": "kafka-policy-proxy-client"}  # the whole Secret


def test_client_properties_with_upstream_tls_are_refused() -> None:
    done = run_helm(
        "template", "x", str(CHART), "--kube-version", KUBE_VERSION,
        "--set", "kafkaClientProperties.existingSecret=s,upstream.tls.enabled=true",
    )  # fmt: skip
    assert done.returncode != 0
    assert "kafkaClientProperties replaces upstream.tls" in done.stderr


def _exported_metrics() -> set[str]:
    return {
        name
        for names in list(REGISTRY._collector_to_names.values())
        for name in names
        if name.startswith("kpp_")
    }


def test_every_alert_reads_metrics_the_proxy_exports(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    (rule,) = _kinds(rendered["full-values.yaml"])["PrometheusRule"]
    alerts = [r for group in rule["spec"]["groups"] for r in group["rules"]]
    exported = _exported_metrics()
    names = {a["alert"] for a in alerts}
    # docs/operations.md's two alerts, at least.
    assert {"KafkaPolicyProxyAuditDropped", "KafkaPolicyProxyAuditRotationPressure"} <= names
    for alert in alerts:
        metrics = set(re.findall(r"\b(kpp_[a-z_]+|up)\{", alert["expr"]))
        assert metrics, alert
        assert metrics - {"up"} <= exported, (alert["alert"], metrics - exported)
        # Every series is this release's: the PodMonitor's job.
        assert alert["expr"].count('job="kafka/kafka-policy-proxy"') == len(
            re.findall(r"\{", alert["expr"])
        ), alert["expr"]
    assert parse_errors([alert["expr"] for alert in alerts]) == {}
    (monitor,) = _kinds(rendered["full-values.yaml"])["PodMonitor"]
    assert monitor["spec"]["podMetricsEndpoints"] == [
        {"port": "admin", "path": "/metrics", "interval": "30s"}
    ]


def test_the_broker_network_policy_admits_only_the_proxy_pods(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    docs = rendered["full-values.yaml"]
    kinds = _kinds(docs)
    (proxy_policy, brokers) = sorted(kinds["NetworkPolicy"], key=lambda d: d["metadata"]["name"])
    (deployment,) = kinds["Deployment"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert brokers["metadata"]["namespace"] == "kafka"
    assert brokers["spec"]["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "kafka"}}
    clients, internal = brokers["spec"]["ingress"]
    assert [p["port"] for p in clients["ports"]] == [9093]
    for peer in clients["from"]:
        # Both selectors in one peer: proxy pods in a named namespace, not any pod so labelled.
        assert peer["podSelector"]["matchLabels"].items() <= pod_labels.items()
        assert set(peer["namespaceSelector"]["matchLabels"]) == {"kubernetes.io/metadata.name"}
    namespaces = {p["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
                  for p in clients["from"]}  # fmt: skip
    assert namespaces == {"kafka", "kafka-proxies"}
    assert [p["port"] for p in internal["ports"]] == [9093, 9094, 9095]
    (peer,) = internal["from"]
    assert peer["podSelector"] == brokers["spec"]["podSelector"]
    # The proxy's own policy: listeners from client namespaces, admin from monitoring only.
    assert proxy_policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    listeners, admin = proxy_policy["spec"]["ingress"]
    assert [p["port"] for p in listeners["ports"]] == [9192, 9201, 9202, 9203, 9204, 9205, 9443]
    assert [p["port"] for p in admin["ports"]] == [9191]
    assert admin["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]


def test_the_readme_commands_run_as_written() -> None:
    text = (CHART / "README.md").read_text().replace("\\\n", "")
    commands = [line for line in text.splitlines() if line.startswith("helm ")]
    assert [c.split()[1] for c in commands] == ["lint", "template"]
    for command in commands:
        argv = shlex.split(command)
        done = subprocess.run(
            [helm(), *argv[1:]], check=False, capture_output=True, text=True, cwd=ROOT
        )
        assert done.returncode == 0, (command, done.stderr)


def test_the_promql_check_refuses_a_broken_expression() -> None:
    broken = 'sum(rate(kpp_requests_total{job="x",}[5m]) > 0'
    assert parse_errors([broken, "up == 0"]) == {
        broken: "1:47: parse error: unclosed left parenthesis"
    }
