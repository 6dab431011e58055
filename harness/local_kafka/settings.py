"""The local cluster's fixed choices: Kafka version, ports, users and JVM options."""

from __future__ import annotations

import os

from harness import REPO

DEFAULT_KAFKA_VERSION = "4.1.1"
DEFAULT_PORT_BASE = 19092
DEFAULT_BROKERS = 3
DEFAULT_TIMEOUT = 120.0
HOST = "127.0.0.1"
DEFAULT_DIR = REPO / ".kafka"
STATE_FILE = "cluster.json"
# Node ids above this would make the SASL port range run into the controller port.
MAX_NODE_ID = 100

SCRAM_USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
SASL_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")

BROKER_JVM_OPTS = (
    "-Xms256m",
    "-Xmx512m",
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)
# Test clusters: C1 only and the serial collector start a node on about 60% of the CPU (21
# against 35 CPU-seconds for three nodes) and idle lighter; throughput is not what they test.
LIGHT_BROKER_JVM_OPTS = (
    "-Xms256m",
    "-Xmx512m",
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)
TOOL_JVM_OPTS = ("-Xmx512m", "-Djava.awt.headless=true")
# Short-lived JVMs start about twice as fast with C1 only and the serial collector.
QUICK_JVM_OPTS = (*TOOL_JVM_OPTS, "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


def default_kafka_version() -> str:
    """The Kafka version to use: env KAFKA_VERSION, else the pinned default."""
    return os.environ.get("KAFKA_VERSION") or DEFAULT_KAFKA_VERSION
