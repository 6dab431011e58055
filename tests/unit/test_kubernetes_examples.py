"""The Kubernetes examples: they parse, their config and policy load, and the pieces fit."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.proxy.config import FILE_SUFFIX, ProxyConfig, section_model

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "kubernetes"
WORKLOADS = ["shared.yaml", "sidecar.yaml"]


def _documents(name: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((EXAMPLES / name).read_text()) if doc]


def _all_documents() -> list[dict[str, Any]]:
    return [doc for path in sorted(EXAMPLES.glob("*.yaml")) for doc in _documents(path.name)]


def _config_maps() -> dict[str, dict[str, str]]:
    return {
        doc["metadata"]["name"]: doc["data"]
        for doc in _all_documents()
        if doc["kind"] == "ConfigMap"
    }


def _proxy_container(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The workload's pod spec and its proxy container (the one running `run --config`)."""
    (deployment,) = [doc for doc in _documents(name) if doc["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    containers = pod.get("initContainers", []) + pod["containers"]
    (proxy,) = [c for c in containers if c.get("args", [])[:1] == ["run"]]
    return pod, proxy


def _mounted_file(pod: dict[str, Any], container: dict[str, Any], path: str) -> tuple[str, str]:
    """The volume holding `path` in the container, and the file's name inside it."""
    file = PurePosixPath(path)
    for mount in container["volumeMounts"]:
        if file.parent == PurePosixPath(mount["mountPath"]):
            (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
            return volume, file.name
    raise AssertionError(f"{path} is not in any volume mounted in {container['name']}")


def _proxy_config(name: str) -> dict[str, Any]:
    pod, proxy = _proxy_container(name)
    args = proxy["args"]
    volume, file = _mounted_file(pod, proxy, args[args.index("--config") + 1])
    return yaml.safe_load(_config_maps()[volume["configMap"]["name"]][file])


def _unknown_keys(data: dict[str, Any], model: type[BaseModel], prefix: str = "") -> list[str]:
    unknown = []
    for key, value in data.items():
        field = model.model_fields.get(key)
        if field is None:
            unknown.append(prefix + key)
            continue
        section = section_model(field.annotation)
        if section is not None and isinstance(value, dict):
            unknown += _unknown_keys(value, section, f"{prefix}{key}.")
    return unknown


def _inline_secrets(data: dict[str, Any], model: type[BaseModel]) -> dict[str, Any]:
    """The config with each secret file replaced by an inline value (the files are Secrets)."""
    out = dict(data)
    for name in getattr(model, "secret_fields", ()):
        if out.pop(name + FILE_SUFFIX, None) is not None:
            out[name] = "from-a-secret"
    for key, value in data.items():
        section = section_model(model.model_fields[key].annotation)
        if section is not None and isinstance(value, dict):
            out[key] = _inline_secrets(value, section)
    return out


def _paths(data: dict[str, Any]) -> list[str]:
    found = []
    for key, value in data.items():
        if isinstance(value, dict):
            found += _paths(value)
        elif key == "file" or key.endswith(FILE_SUFFIX):
            found.append(value)
    return found


def test_every_manifest_is_a_named_kubernetes_object() -> None:
    docs = _all_documents()
    assert len(docs) >= 6
    for doc in docs:
        assert doc["apiVersion"] and doc["kind"] and doc["metadata"]["name"], doc


@pytest.mark.parametrize("name", WORKLOADS)
def test_config_keys_exist_and_validate(name: str) -> None:
    data = _proxy_config(name)
    assert _unknown_keys(data, ProxyConfig) == []
    ProxyConfig(**_inline_secrets(data, ProxyConfig))


@pytest.mark.parametrize("name", WORKLOADS)
def test_every_file_the_config_names_is_mounted(name: str) -> None:
    pod, proxy = _proxy_container(name)
    for path in _paths(_proxy_config(name)):
        volume, file = _mounted_file(pod, proxy, path)
        if "configMap" in volume:
            assert file in _config_maps()[volume["configMap"]["name"]], path
        else:
            assert "secret" in volume, f"{path}: mount it from a ConfigMap or a Secret"


@pytest.mark.parametrize("name", WORKLOADS)
def test_probes_use_the_admin_listener(name: str) -> None:
    pod, proxy = _proxy_container(name)
    config = _proxy_config(name)
    (admin,) = [p for p in proxy["ports"] if p["name"] == "admin"]
    assert admin["containerPort"] == config["admin"]["port"]
    # The kubelet dials the pod address, not loopback.
    assert config["admin"]["bind_host"] == "0.0.0.0"
    assert proxy["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "admin"}
    assert proxy["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "admin"}
    # SIGTERM drains for shutdown_timeout_s before the kubelet kills the pod.
    assert pod["terminationGracePeriodSeconds"] > config["shutdown_timeout_s"]


def test_the_service_publishes_bootstrap_and_each_broker_listener() -> None:
    config = _proxy_config("shared.yaml")
    _, proxy = _proxy_container("shared.yaml")
    (service,) = [doc for doc in _documents("shared.yaml") if doc["kind"] == "Service"]
    listeners = config["listeners"]
    published = {p["port"] for p in service["spec"]["ports"]}
    served = {p["containerPort"] for p in proxy["ports"]}
    brokers = {port for port in published if port != listeners["bootstrap_port"]}
    assert listeners["bootstrap_port"] in published
    assert brokers and all(port >= listeners["broker_port_base"] for port in brokers)
    assert published <= served
    assert listeners["advertised_host"].startswith(service["metadata"]["name"] + ".")


def test_the_policy_config_map_loads() -> None:
    text = _config_maps()["kafka-policy-proxy-policy"]["policy.yaml"]
    policy = load_policy(text, "policy-configmap.yaml")
    assert len(policy.rule_names) >= 5
    policy.close()
