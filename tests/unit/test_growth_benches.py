"""The growth benches (bench/growth_*.py, docs/benchmarks.md's growth curves) still run, at a
tiny size, and print their table and draw their chart; their figures are not checked here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness import REPO

TINY = {
    "growth_metadata": ["--topics", "10,50", "--runs", "1"],
    "growth_fact_cache": ["--topics", "50,100", "--runs", "1", "--requests", "300"],
    "growth_judge": ["--batches", "1,20", "--topics", "40", "--runs", "1"],
}


@pytest.mark.parametrize("bench", sorted(TINY))
def test_a_growth_bench_prints_its_curve_and_draws_it(bench: str, tmp_path: Path) -> None:
    chart = tmp_path / f"{bench}.png"
    result = subprocess.run(
        [sys.executable, "-m", f"bench.{bench}", *TINY[bench], "--chart", str(chart)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line for line in result.stdout.splitlines() if line.startswith("|")]
    assert len(rows) == 2 + 2, result.stdout  # the header, its rule, one row per size
    assert chart.read_bytes().startswith(b"\x89PNG")
