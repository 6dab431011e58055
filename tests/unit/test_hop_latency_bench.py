"""bench.hop_latency (docs/benchmarks.md's added latency without Kafka) still runs, at a tiny
size, and prints its table; its figures are not checked here."""

from __future__ import annotations

import subprocess
import sys

from harness import REPO

PORT_BASE = 19440  # its fake broker, relay and proxies: 19440..19454


def test_the_hop_latency_bench_prints_a_row_per_path() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.hop_latency",
            "--rounds",
            "1",
            "--samples",
            "20",
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
        "direct",
        "proxy",
        "baseline",
        "uvloop relay",
    ]
    assert "20 round trips per path" in result.stderr
