"""Compile broker policy classes with javac against the cluster's kafka-clients jar."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from harness import REPO
from harness.local_kafka import default_kafka_version, ensure_jars

REFERENCE_SOURCE = REPO / "examples" / "java-policy" / "src" / "com" / "example" / "policy"
REFERENCE_CLASS = "com.example.policy.ReferencePolicy"


def kafka_clients_jar() -> Path:
    """The kafka-clients jar of the Kafka version the local clusters run (from Maven, cached)."""
    version = default_kafka_version()
    return ensure_jars(version) / f"kafka-clients-{version}.jar"


def build_jar(out: Path, sources: Mapping[str, str] | None = None) -> Path:
    """A jar of the reference policy, or of `sources` (class name -> Java source), at `out`."""
    with tempfile.TemporaryDirectory() as work:
        src = Path(work) / "src"
        classes = Path(work) / "classes"
        if sources is None:
            files = sorted(REFERENCE_SOURCE.glob("*.java"))
        else:
            files = []
            for name, text in sources.items():
                path = src / (name.replace(".", "/") + ".java")
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
                files.append(path)
        javac = shutil.which("javac")
        assert javac is not None, "javac not found: a JDK 17+ is needed"
        subprocess.run(
            [javac, "-d", str(classes), "-cp", str(kafka_clients_jar()), *map(str, files)],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            ["jar", "cf", str(out), "-C", str(classes), "."], check=True, capture_output=True
        )
    return out
