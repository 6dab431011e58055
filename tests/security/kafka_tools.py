"""Kafka's CLI tools as the attacks run them: a SCRAM `--command-config` file, and one tool run."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any


def command_config(path: Path, user: str, password: str) -> Path:
    """A Kafka tool `--command-config` file for SCRAM-SHA-512."""
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{password}";'
    )
    path.write_text(
        f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\nsasl.jaas.config={jaas}\n"
    )
    return path


def tool(kafka: Any, name: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        kafka.tool_command(name, *args),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "KAFKA_HEAP_OPTS": "-Xmx256m"},
    )
