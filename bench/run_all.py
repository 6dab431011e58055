"""`make bench`: run every benchmark in turn and print its results (see docs/benchmarks.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
SCRIPTS = [
    "codec_bench.py",
    "metadata_rewrite_bench.py",
    "policy_bench.py",
    "throughput.py",
    "connections.py",
    "snapshot_bench.py",
]


def main() -> int:
    """Run each script with this interpreter; return non-zero if any failed."""
    failed = []
    for script in SCRIPTS:
        print(f"\n## {script}", flush=True)
        if subprocess.run([sys.executable, str(BENCH / script)], check=False).returncode:
            failed.append(script)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
