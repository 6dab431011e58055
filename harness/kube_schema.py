"""Validate Kubernetes manifests against the API's schemas, offline.

Built-in kinds: the OpenAPI schemas `kubernetes-validate` (PyPI) bundles per Kubernetes version,
in their strict form (an unknown field is an error, as `kubectl apply`'s strict field
validation makes it). The Prometheus Operator's kinds: the CRDs its Go module ships
(example/prometheus-operator-crd/), made strict the same way.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from kubernetes_validate import utils as kube

PROMETHEUS_OPERATOR = "github.com/prometheus-operator/prometheus-operator@v0.85.0"
PROMETHEUS_OPERATOR_INSTALL = f"go mod download {PROMETHEUS_OPERATOR}"
CRD_FILES = {
    ("monitoring.coreos.com/v1", "PodMonitor"): "monitoring.coreos.com_podmonitors.yaml",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "monitoring.coreos.com_prometheusrules.yaml",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "monitoring.coreos.com_servicemonitors.yaml",
}


def validate(doc: dict[str, Any], kube_version: str) -> list[str]:
    """The schema errors of one manifest (empty: valid), for Kubernetes `kube_version`."""
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key in CRD_FILES:
        validator = jsonschema.Draft7Validator(_crd_schema(*key))
        return [_describe(error) for error in validator.iter_errors(doc)]
    try:
        kube.validate(doc, kube_version, strict=True)
    except kube.ValidationError as error:
        return [_describe(error)]
    except kube.SchemaNotFoundError as error:
        return [f"no schema: {error}"]
    return []


def _describe(error: jsonschema.ValidationError) -> str:
    return f"{'.'.join(str(part) for part in error.absolute_path) or '(top)'}: {error.message}"


@functools.cache
def _module_dir() -> Path:
    done = subprocess.run(
        ["go", "mod", "download", "-json", PROMETHEUS_OPERATOR],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        env=_go_env(),
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"the Prometheus Operator's CRDs are missing; fetch them with: "
            f"{PROMETHEUS_OPERATOR_INSTALL}\n{done.stdout}{done.stderr}"
        )
    return Path(json.loads(done.stdout)["Dir"])


def _go_env() -> dict[str, str]:
    # Read from the module cache .ci/run filled; never reach out in the middle of a test.
    return {**os.environ, "GOPROXY": "off"}


@functools.cache
def _crd_schema(api_version: str, kind: str) -> dict[str, Any]:
    crd = yaml.safe_load(
        (
            _module_dir() / "example" / "prometheus-operator-crd" / CRD_FILES[(api_version, kind)]
        ).read_text()
    )
    version = api_version.rpartition("/")[2]
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    strict: dict[str, Any] = _strict(served["schema"]["openAPIV3Schema"])
    return strict


def _strict(schema: Any) -> Any:
    """The schema with unknown fields refused wherever it lists the fields."""
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _strict(value) for key, value in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out
