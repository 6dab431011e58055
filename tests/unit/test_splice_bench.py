"""bench.splice_bench (docs/benchmarks.md's spliced bodies) still runs, at a tiny size, and
prints its table; its figures are not checked here."""

from __future__ import annotations

from harness import REPO
from tests.unit.bench_runs import first_column, run_bench

PORT_BASE = 19375  # its fake broker, relays and proxies: 19375..19392


def test_the_splice_bench_prints_a_row_per_path() -> None:
    rows, _ = run_bench(
        "splice_bench",
        "--rounds",
        "1",
        "--gib",
        "0.01",
        "--port-base",
        str(PORT_BASE),
        "--baseline",
        str(REPO),  # the same tree: the row is there
    )
    assert first_column(rows) == [
        "proxy, copying",
        "proxy, splice",
        "baseline, splice",
        "uvloop relay",
        "splice relay",
    ]
