"""A real Apache Kafka cluster (KRaft) on 127.0.0.1 as plain JVMs: `make run`, tests, benches.

Stdlib only, except for the throwaway CA of the TLS listeners (harness/throwaway_ca.py, on the
`cryptography` package), which `up` imports. Importing it has no side effects. Its command
line is `python -m harness.local_kafka` (scripts/local-kafka).
"""

from harness.local_kafka.cluster import LocalKafka
from harness.local_kafka.jars import TOOLS, ensure_jars, jar_classpath, java_executable
from harness.local_kafka.node_config import TlsFiles
from harness.local_kafka.probe import fetch_broker_ids, port_is_free
from harness.local_kafka.report import LocalKafkaError
from harness.local_kafka.settings import default_kafka_version

__all__ = [
    "TOOLS",
    "LocalKafka",
    "LocalKafkaError",
    "TlsFiles",
    "default_kafka_version",
    "ensure_jars",
    "fetch_broker_ids",
    "jar_classpath",
    "java_executable",
    "port_is_free",
]
