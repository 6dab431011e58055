"""Looking at the cluster from outside: free ports, live JVMs, broker ids over the wire."""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Sequence
from pathlib import Path

from harness.frames import read_frame
from harness.local_kafka.report import LocalKafkaError
from harness.local_kafka.settings import HOST


def port_is_free(port: int, host: str = HOST) -> bool:
    """Whether a listener could bind `host:port` now (TIME_WAIT leftovers do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Kafka binds with SO_REUSEADDR too, so only a live listener really blocks it.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def check_ports_free(ports: Sequence[int]) -> None:
    """Raise LocalKafkaError naming every port of `ports` a listener already holds."""
    taken = [port for port in ports if not port_is_free(port)]
    if taken:
        listing = ", ".join(f"{HOST}:{port}" for port in taken)
        raise LocalKafkaError(
            f"port(s) already in use: {listing} (another cluster running? "
            "try `local-kafka down` or a different --port-base)",
            2,
        )


def fetch_broker_ids(host: str, port: int, timeout: float = 3.0) -> dict[int, tuple[str, int]]:
    """Send a Metadata v4 request (no topics) and return node id -> advertised (host, port)."""
    client_id = b"local-kafka"
    # Header v1: api_key=3 (Metadata), api_version=4, correlation_id, client_id.
    header = struct.pack(">hhih", 3, 4, 1, len(client_id)) + client_id
    # Body: empty topic array (brokers only), allow_auto_topic_creation=false.
    body = struct.pack(">ib", 0, 0)
    request = header + body
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", len(request)) + request)
        payload = read_frame(sock)
    correlation_id, _throttle_ms, count = struct.unpack_from(">iii", payload, 0)
    if correlation_id != 1:
        raise ConnectionError(f"unexpected correlation id {correlation_id}")
    offset = 12
    brokers: dict[int, tuple[str, int]] = {}
    for _ in range(count):
        node_id, host_len = struct.unpack_from(">ih", payload, offset)
        offset += 6
        broker_host = payload[offset : offset + host_len].decode()
        offset += host_len
        broker_port, rack_len = struct.unpack_from(">ih", payload, offset)
        offset += 6 + max(rack_len, 0)
        brokers[node_id] = (broker_host, broker_port)
    return brokers


def pid_alive(pid: int, marker: str) -> bool:
    """Whether `pid` runs and is still the JVM we started (its argv holds `marker`)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path(f"/proc/{pid}")
    try:
        state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        cmdline = (proc / "cmdline").read_bytes()
    except (OSError, IndexError):
        # No procfs (macOS): trust kill(0).
        return True
    return state != "Z" and marker.encode() in cmdline
