"""One Kafka process of the local cluster: its id, roles, ports, pid and folder."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any


@dataclasses.dataclass
class Node:
    """One Kafka process: its id, roles, ports and pid."""

    node_id: int
    port: int
    sasl_port: int
    controller_port: int | None
    advertised_port: int
    ssl_port: int
    sasl_ssl_port: int
    mtls_port: int
    pid: int | None = None

    @property
    def roles(self) -> str:
        """Kafka's `process.roles`: node 1 is also the controller."""
        return "broker,controller" if self.controller_port is not None else "broker"

    @property
    def ports(self) -> list[int]:
        """Every port the node listens on."""
        extra = [self.controller_port] if self.controller_port is not None else []
        return [
            self.port,
            self.sasl_port,
            self.ssl_port,
            self.sasl_ssl_port,
            self.mtls_port,
            *extra,
        ]

    def to_json(self) -> dict[str, Any]:
        """The node as it is recorded in cluster.json."""
        return {
            "node_id": self.node_id,
            "roles": self.roles,
            "port": self.port,
            "sasl_port": self.sasl_port,
            "controller_port": self.controller_port,
            "advertised_port": self.advertised_port,
            "ssl_port": self.ssl_port,
            "sasl_ssl_port": self.sasl_ssl_port,
            "mtls_port": self.mtls_port,
            "pid": self.pid,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Node:
        """A node read back from cluster.json."""
        return cls(
            node_id=int(data["node_id"]),
            port=int(data["port"]),
            sasl_port=int(data["sasl_port"]),
            controller_port=data.get("controller_port"),
            advertised_port=int(data["advertised_port"]),
            ssl_port=int(data["ssl_port"]),
            sasl_ssl_port=int(data["sasl_ssl_port"]),
            mtls_port=int(data["mtls_port"]),
            pid=data.get("pid"),
        )


def controller_port_of(port_base: int, stride: int = 100) -> int:
    """The single KRaft controller's port (node 1's)."""
    return port_base + 2 * stride


def plan_node(
    node_id: int, port_base: int, advertise_ports: Mapping[int, int], stride: int = 100
) -> Node:
    """Node `node_id`'s ports, from the cluster's port base (see `local-kafka --help`); each
    kind of listener takes a block of `stride` ports (a small stride packs a small cluster)."""
    port = port_base + node_id - 1
    return Node(
        node_id=node_id,
        port=port,
        sasl_port=port + stride,
        controller_port=controller_port_of(port_base, stride) if node_id == 1 else None,
        advertised_port=advertise_ports.get(node_id, port),
        ssl_port=port + 3 * stride,
        sasl_ssl_port=port + 4 * stride,
        mtls_port=port + 5 * stride,
    )


def node_key(node: Node) -> int:
    """Sort key: nodes in id order."""
    return node.node_id


def node_dir(directory: Path, node_id: int) -> Path:
    """A node's folder in the cluster directory: its config, data and logs."""
    return directory / f"node-{node_id}"


def config_path(directory: Path, node_id: int) -> Path:
    """A node's server.properties (its path also marks the node's JVM in `ps`)."""
    return node_dir(directory, node_id) / "server.properties"
