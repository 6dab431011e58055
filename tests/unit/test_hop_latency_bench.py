"""bench.hop_latency (docs/benchmarks.md's added latency without Kafka) still runs, at a tiny
size, and prints its table; its figures are not checked here."""

from __future__ import annotations

from harness import REPO
from tests.unit.bench_runs import first_column, run_bench

PORT_BASE = 19440  # its fake broker, relay and proxies: 19440..19454


def test_the_hop_latency_bench_prints_a_row_per_path() -> None:
    rows, stderr = run_bench(
        "hop_latency",
        "--rounds",
        "1",
        "--samples",
        "20",
        "--port-base",
        str(PORT_BASE),
        "--baseline",
        str(REPO),  # the same tree: the row is there
    )
    assert first_column(rows) == ["direct", "proxy", "baseline", "uvloop relay"]
    assert "20 round trips per path" in stderr
