"""The growth benches (bench/growth_*.py, docs/benchmarks.md's growth curves) still run, at a
tiny size, and print their table and draw their chart; their figures are not checked here."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.bench_runs import run_bench

TINY = {
    "growth_metadata": ["--topics", "10,50", "--runs", "1"],
    "growth_fact_cache": ["--topics", "50,100", "--runs", "1", "--requests", "300"],
    "growth_judge": ["--batches", "1,20", "--topics", "40", "--runs", "1"],
}


@pytest.mark.parametrize("bench", sorted(TINY))
def test_a_growth_bench_prints_its_curve_and_draws_it(bench: str, tmp_path: Path) -> None:
    chart = tmp_path / f"{bench}.png"
    rows, _ = run_bench(bench, *TINY[bench], "--chart", str(chart))
    assert len(rows) == 2 + 2, rows  # the header, its rule, one row per size
    assert chart.read_bytes().startswith(b"\x89PNG")
