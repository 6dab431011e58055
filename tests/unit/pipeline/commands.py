"""Running the pipeline jobs as an operator does: the installed `kafka-policy-proxy` command and
spark-submit, each in a process of its own, several at once if need be (`start`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

BIN = Path(sys.executable).parent
# Short-lived JVMs start in about half the time with the C1 compiler only and the serial
# collector, as the test Kafka brokers run; nothing a job computes depends on either.
FAST_JVM = {"JDK_JAVA_OPTIONS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}


@dataclass(frozen=True)
class Started:
    """A command running in the background; `done` waits for it."""

    process: subprocess.Popen[str]
    output: Path  # a directory of its own: stdout and stderr
    timeout: float

    def done(self) -> subprocess.CompletedProcess[str]:
        """Its output and exit code, once it exits (killed after `timeout` seconds)."""
        try:
            self.process.wait(timeout=self.timeout)
        finally:
            self.stop()
        stdout, stderr = ((self.output / name).read_text() for name in ("stdout", "stderr"))
        shutil.rmtree(self.output)
        code = self.process.returncode
        return subprocess.CompletedProcess(self.process.args, code, stdout, stderr)

    def stop(self) -> None:
        """Kill it if it still runs (a test that failed before waiting for it)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def start(
    command: Sequence[str], *, timeout: float = 300, env: Mapping[str, str] | None = None
) -> Started:
    """Start `command` (with `env` added to the environment), its output captured in files: a
    pipe nobody reads yet could fill up."""
    output = Path(tempfile.mkdtemp(prefix="pipeline-command-"))
    with (output / "stdout").open("w") as stdout, (output / "stderr").open("w") as stderr:
        process = subprocess.Popen(
            list(command),
            stdout=stdout,
            stderr=stderr,
            text=True,
            env={**os.environ, **FAST_JVM, **(env or {})},
        )
    return Started(process, output, timeout)


def start_pipeline_cli(*args: str, timeout: float = 300) -> Started:
    """`kafka-policy-proxy pipeline ARGS...`, started in the background."""
    return start([str(BIN / "kafka-policy-proxy"), "pipeline", *args], timeout=timeout)


def pipeline_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`kafka-policy-proxy pipeline ARGS...`, its output captured, whatever its exit code."""
    return start_pipeline_cli(*args, timeout=timeout).done()
