"""PromQL checked by Prometheus' own parser (tests/tools/promql_check, a small Go program).

The program is built with the go command from the module cache that .ci/run fills; a test
never fetches modules itself.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import tempfile
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "tests" / "tools" / "promql_check"
PREPARE = f"(cd {SOURCE.relative_to(SOURCE.parents[2])} && go build -o /dev/null .)"


@functools.cache
def _binary() -> Path:
    target = Path(tempfile.mkdtemp(prefix="promql-check-")) / "promql-check"
    done = subprocess.run(
        ["go", "build", "-o", str(target), "."],
        check=False,
        capture_output=True,
        text=True,
        cwd=SOURCE,
        timeout=600,
        env={**os.environ, "GOPROXY": "off", "GOFLAGS": "-mod=readonly"},
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"cannot build the PromQL checker; fetch its modules as .ci/run does: {PREPARE}\n"
            + done.stderr
        )
    return target


def parse_errors(expressions: list[str]) -> dict[str, str]:
    """Each expression Prometheus' parser refuses, with its error (empty: all parse)."""
    done = subprocess.run(
        [str(_binary())],
        input="".join(json.dumps(expr) + "\n" for expr in expressions),
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    results = done.stdout.splitlines()
    return {
        expr: result for expr, result in zip(expressions, results, strict=True) if result != "ok"
    }
