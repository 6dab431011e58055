"""`make bench`: run every benchmark in turn and print its results (see docs/benchmarks.md)."""

from __future__ import annotations

import subprocess
import sys

from harness import REPO

BENCHES = [
    "codec_bench",
    "metadata_rewrite_bench",
    "policy_bench",
    "judge_bench",
    "throughput",
    "hop_latency",
    "splice_bench",
    "connections",
    "snapshot_bench",
    "decision_id_bench",
    "growth_metadata",
    "growth_fact_cache",
    "growth_judge",
    "growth_connections",
]


def main() -> int:
    """Run each bench as `python -m bench.<name>` from the checkout; non-zero if any failed."""
    failed = []
    for name in BENCHES:
        print(f"\n## {name}", flush=True)
        command = [sys.executable, "-m", f"bench.{name}"]
        if subprocess.run(command, cwd=REPO, check=False).returncode:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
