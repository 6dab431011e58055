"""Kafka's jars, resolved through Maven once per version, and the commands of its CLI tools."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from harness.local_kafka.report import LocalKafkaError, progress
from harness.local_kafka.settings import QUICK_JVM_OPTS, TOOL_JVM_OPTS

POM = Path(__file__).resolve().with_name("kafka-pom.xml")

# Kafka CLI script name -> main class, as in the bin/ scripts of the Kafka 4.1 distribution.
TOOLS: dict[str, str] = {
    "kafka-acls": "org.apache.kafka.tools.AclCommand",
    "kafka-broker-api-versions": "org.apache.kafka.tools.BrokerApiVersionsCommand",
    "kafka-client-metrics": "org.apache.kafka.tools.ClientMetricsCommand",
    "kafka-cluster": "org.apache.kafka.tools.ClusterTool",
    "kafka-configs": "kafka.admin.ConfigCommand",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-share-consumer": "org.apache.kafka.tools.consumer.ConsoleShareConsumer",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-delegation-tokens": "org.apache.kafka.tools.DelegationTokenCommand",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-dump-log": "kafka.tools.DumpLogSegments",
    "kafka-e2e-latency": "org.apache.kafka.tools.EndToEndLatency",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-groups": "org.apache.kafka.tools.GroupsCommand",
    "kafka-leader-election": "org.apache.kafka.tools.LeaderElectionCommand",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-metadata-quorum": "org.apache.kafka.tools.MetadataQuorumCommand",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-reassign-partitions": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
    "kafka-replica-verification": "org.apache.kafka.tools.ReplicaVerificationTool",
    "kafka-share-groups": "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
    "kafka-storage": "kafka.tools.StorageTool",
    "kafka-streams-groups": "org.apache.kafka.tools.streams.StreamsGroupCommand",
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-verifiable-consumer": "org.apache.kafka.tools.VerifiableConsumer",
    "kafka-verifiable-producer": "org.apache.kafka.tools.VerifiableProducer",
}

# Tools that may move a lot of data keep the full JIT.
THROUGHPUT_TOOLS = frozenset(
    {
        "kafka-console-consumer",
        "kafka-console-producer",
        "kafka-console-share-consumer",
        "kafka-consumer-perf-test",
        "kafka-e2e-latency",
        "kafka-producer-perf-test",
        "kafka-replica-verification",
        "kafka-verifiable-consumer",
        "kafka-verifiable-producer",
    }
)

LOG4J_TOOLS = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="warn">
  <Appenders>
    <Console name="stderr" target="SYSTEM_ERR">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </Console>
  </Appenders>
  <Loggers>
    <Root level="warn"><AppenderRef ref="stderr"/></Root>
  </Loggers>
</Configuration>
"""


def cache_dir(kafka_version: str) -> Path:
    """The per-version cache folder, under XDG_CACHE_HOME (default ~/.cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kafka-policy-proxy" / f"kafka-{kafka_version}"


def java_executable() -> str:
    """The `java` to run: $JAVA_HOME/bin/java if set, else the one on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise LocalKafkaError("`java` not found: install a JDK (17 or newer) or set JAVA_HOME", 2)
    return found


def ensure_jars(kafka_version: str) -> Path:
    """Resolve Kafka's jars through Maven once per version, and return the cached libs dir."""
    root = cache_dir(kafka_version)
    libs = root / "libs"
    marker = root / ".complete"
    if marker.is_file() and libs.is_dir():
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise LocalKafkaError(
            f"`mvn` not found: Maven is needed once to download Kafka {kafka_version}'s jars", 2
        )
    root.mkdir(parents=True, exist_ok=True)
    # A lock, so concurrent first starts (parallel test runs) download only once.
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.is_file() and libs.is_dir():
            return libs
        progress(f"downloading Kafka {kafka_version} jars with Maven (first run only)")
        started = time.monotonic()
        staging = Path(tempfile.mkdtemp(prefix="libs.", dir=root))
        command = [
            mvn,
            "-q",
            "-B",
            "-f",
            str(POM),
            f"-Dkafka.version={kafka_version}",
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={staging}",
        ]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0 or not any(staging.glob("kafka_2.13-*.jar")):
            shutil.rmtree(staging, ignore_errors=True)
            output = (result.stdout + result.stderr).strip().splitlines()
            detail = output[-1] if output else f"exit code {result.returncode}"
            raise LocalKafkaError(f"Maven could not resolve Kafka {kafka_version}: {detail}", 2)
        shutil.rmtree(libs, ignore_errors=True)
        staging.rename(libs)
        marker.write_text(f"{kafka_version}\n")
        progress(f"jars ready in {time.monotonic() - started:.1f}s: {libs}")
    return libs


def jar_classpath(libs: Path) -> str:
    """An explicit, sorted classpath of every jar in `libs`."""
    return os.pathsep.join(str(jar) for jar in sorted(libs.glob("*.jar")))


def _write_if_changed(path: Path, text: str) -> None:
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)


def tool_command_for(kafka_version: str, name: str, *args: str) -> list[str]:
    """The argv that runs Kafka CLI tool `name` (its bin/ script name, `.sh` optional)."""
    script = name.removesuffix(".sh")
    main_class = TOOLS.get(script)
    if main_class is None:
        raise LocalKafkaError(f"unknown Kafka tool {name!r}; known: {', '.join(sorted(TOOLS))}", 2)
    java = java_executable()
    libs = ensure_jars(kafka_version)
    log_config = libs.parent / "tools-log4j2.xml"
    _write_if_changed(log_config, LOG4J_TOOLS)
    return [
        java,
        *(TOOL_JVM_OPTS if script in THROUGHPUT_TOOLS else QUICK_JVM_OPTS),
        f"-Dlog4j2.configurationFile={log_config}",
        "-cp",
        jar_classpath(libs),
        main_class,
        *args,
    ]
