"""A rendered workload's proxy container as the kubelet would start it, laid out on this machine.

The argv comes from the Dockerfile's ENTRYPOINT and CMD and the container's `command` and
`args`, by Kubernetes' rule; the ConfigMap volumes are written under a directory, and the paths
the config names are moved under it, so `kafka-policy-proxy` can run the pod's own config.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from harness import REPO

DOCKERFILE = REPO / "Dockerfile"
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet")


def image_argv(dockerfile: Path = DOCKERFILE) -> tuple[list[str], list[str]]:
    """The image's ENTRYPOINT and CMD (the last of each, in JSON form), as Kubernetes sees them."""
    found: dict[str, list[str]] = {"ENTRYPOINT": [], "CMD": []}
    for line in dockerfile.read_text().splitlines():
        match = re.match(r"^(ENTRYPOINT|CMD)\s+(\[.*\])\s*$", line)
        if match:
            found[match[1]] = json.loads(match[2])
    return found["ENTRYPOINT"], found["CMD"]


def container_argv(container: dict[str, Any], dockerfile: Path = DOCKERFILE) -> list[str]:
    """Kubernetes' rule: `command` replaces ENTRYPOINT (and drops CMD), `args` replace CMD."""
    entrypoint, cmd = image_argv(dockerfile)
    if "command" in container:
        return [*container["command"], *container.get("args", [])]
    return [*entrypoint, *container.get("args", cmd)]


def proxy_containers(docs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(pod spec, container) for every container that runs the proxy image."""
    found = []
    for doc in docs:
        if doc["kind"] in WORKLOAD_KINDS:
            pod = doc["spec"]["template"]["spec"]
            for container in pod.get("initContainers", []) + pod["containers"]:
                if container["image"].startswith("kafka-policy-proxy:"):
                    found.append((pod, container))
    return found


def lay_out(
    docs: list[dict[str, Any]], pod: dict[str, Any], container: dict[str, Any], root: Path
) -> dict[str, str]:
    """Write the container's ConfigMap volumes under root: mount path -> volume kind.

    Kinds: `configMap` (written), `external configMap` (one the render does not hold),
    `secret` (left empty: you create it), `emptyDir`.
    """
    config_maps = {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    kinds = {}
    for mount in container["volumeMounts"]:
        volume = volumes[mount["name"]]
        target = root / mount["mountPath"].lstrip("/")
        target.mkdir(parents=True, exist_ok=True)
        kind = next(k for k in ("configMap", "secret", "emptyDir") if k in volume)
        if kind == "configMap":
            data = config_maps.get(volume["configMap"]["name"])
            if data is None:
                kind = "external configMap"
            for key, text in (data or {}).items():
                (target / key).write_text(text)
        kinds[mount["mountPath"]] = kind
    return kinds


def relocate(config_text: str, mounts: dict[str, str], root: Path) -> str:
    """The config with every path under a mount moved under root (one pass: /tmp is a mount)."""
    pattern = "|".join(re.escape(m) for m in sorted(mounts, key=len, reverse=True))
    return re.sub(f"(?<= )({pattern})/", lambda m: f"{root}{m[1]}/", config_text)


def environment(container: dict[str, Any], downward: str) -> dict[str, str]:
    """The container's variables; `downward` stands in for each one from the downward API."""
    return {item["name"]: item.get("value", downward) for item in container.get("env", [])}
