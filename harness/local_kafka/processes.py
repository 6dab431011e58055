"""The nodes' JVMs: formatting storage, starting a node detached, and reading why one failed."""

from __future__ import annotations

import base64
import subprocess
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

from harness.local_kafka.jars import TOOLS
from harness.local_kafka.node import Node, config_path, node_dir
from harness.local_kafka.report import LocalKafkaError
from harness.local_kafka.settings import QUICK_JVM_OPTS, SCRAM_USERS


def new_cluster_id() -> str:
    """A fresh cluster id in Kafka's Uuid text form."""
    # url-safe base64 of 16 random bytes, unpadded, never starting with '-' (it would read as
    # a CLI option).
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def format_storage(
    java: str, classpath: str, directory: Path, nodes: Sequence[Node], cluster_id: str
) -> None:
    """Run `kafka-storage format` for every node at once; the controller gets the SCRAM users."""
    running: list[tuple[Node, subprocess.Popen[str]]] = []
    for node in nodes:
        command = [
            java,
            *QUICK_JVM_OPTS,
            f"-Dlog4j2.configurationFile={node_dir(directory, node.node_id) / 'log4j2.xml'}",
            "-cp",
            classpath,
            TOOLS["kafka-storage"],
            "format",
            "--config",
            str(config_path(directory, node.node_id)),
            "--cluster-id",
            cluster_id,
            "--ignore-formatted",
        ]
        if node.controller_port is not None:
            # SCRAM credentials live in the metadata log, which the controller bootstraps.
            for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                for user, password in SCRAM_USERS.items():
                    command += ["--add-scram", f"{mechanism}=[name={user},password={password}]"]
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        running.append((node, proc))
    failures = []
    for node, proc in running:
        output, _ = proc.communicate()
        if proc.returncode != 0:
            failures.append(f"node {node.node_id}: {_java_error(output, proc.returncode)}")
    if failures:
        raise LocalKafkaError("kafka-storage format failed: " + "; ".join(failures))


def start_node(
    java: str, classpath: str, directory: Path, node: Node, jvm_opts: Sequence[str]
) -> subprocess.Popen[bytes]:
    """Start the node's JVM in a session of its own, its output appended to server.log."""
    folder = node_dir(directory, node.node_id)
    command = [
        java,
        *jvm_opts,
        f"-Dlog4j2.configurationFile={folder / 'log4j2.xml'}",
        f"-Dkafka.logs.dir={folder}",
        "-cp",
        classpath,
        "kafka.Kafka",
        str(config_path(directory, node.node_id)),
    ]
    with (folder / "server.log").open("ab") as out:
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=folder,
            start_new_session=True,
        )


def _java_error(output: str, returncode: int) -> str:
    """The most telling line of a failed JVM's output: its last non-stack-trace line."""
    lines = [line for line in output.splitlines() if line.strip() and not line[0].isspace()]
    return lines[-1].strip() if lines else f"exit code {returncode}"


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def print_log_tails(folder: Path) -> None:
    """Show the end of a failed node's JVM output and Kafka log on stderr."""
    for log in (folder / "server.log", folder / "kafka.log"):
        last_lines = _tail(log)
        if last_lines:
            print(f"--- tail of {log} ---\n{last_lines}", file=sys.stderr)
