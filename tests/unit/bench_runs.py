"""Running a bench at a tiny size from a test: its exit, its Markdown table, its stderr."""

from __future__ import annotations

import subprocess
import sys

from harness import REPO


def run_bench(name: str, *args: str) -> tuple[list[str], str]:
    """`python -m bench.<name> args` from the checkout; the table's rows and stderr (exit 0)."""
    result = subprocess.run(
        [sys.executable, "-m", f"bench.{name}", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line for line in result.stdout.splitlines() if line.startswith("|")]
    assert rows, result.stdout
    return rows, result.stderr


def first_column(rows: list[str]) -> list[str]:
    """The first cell of each row below a table's header and rule."""
    return [row.split("|")[1].strip() for row in rows[2:]]
