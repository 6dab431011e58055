"""The connections growth bench (bench/growth_connections.py) still runs, at a tiny size, on the
shared cluster, with its own proxy (19280, nodes 19290+): the idle connections it holds reach
the proxy, and produce goes through it. Its latencies are not checked here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.growth_connections import measure

pytestmark = pytest.mark.integration


def test_the_connections_bench_holds_its_connections_and_measures_both_paths(
    kafka: Any, tmp_path: Path
) -> None:
    rows = measure(kafka, tmp_path, counts=[1, 41], samples=20, rounds=1, idle_s=0.5)
    assert [r["connections"] for r in rows] == [1, 41]
    # Each idle connection is a client socket and a broker socket in the proxy.
    assert rows[1]["proxy_fds"] >= rows[0]["proxy_fds"] + 2 * 40
    for row in rows:
        assert row["direct_p50"] > 0 and row["proxy_p50"] > 0
        assert row["proxy_p99"] >= row["proxy_p50"]
