"""bench.splice_bench (docs/benchmarks.md's spliced bodies) still runs, at a tiny size, and
prints its table; its figures are not checked here."""

from __future__ import annotations

import subprocess
import sys

from harness import REPO

PORT_BASE = 19375  # its fake broker, relays and proxies: 19375..19392


def test_the_splice_bench_prints_a_row_per_path() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.splice_bench",
            "--rounds",
            "1",
            "--gib",
            "0.01",
            "--port-base",
            str(PORT_BASE),
            "--baseline",
            str(REPO),  # the same tree: the row is there
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line for line in result.stdout.splitlines() if line.startswith("|")]
    assert [row.split("|")[1].strip() for row in rows[2:]] == [
        "proxy, copying",
        "proxy, splice",
        "baseline, splice",
        "uvloop relay",
        "splice relay",
    ]
