"""Running the pipeline jobs as an operator does: the installed `kafka-policy-proxy` command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def pipeline_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`kafka-policy-proxy pipeline ARGS...`, its output captured, whatever its exit code."""
    return subprocess.run(
        [str(BIN / "kafka-policy-proxy"), "pipeline", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
