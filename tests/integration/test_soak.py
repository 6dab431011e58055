"""The quick soak (`python -m bench.soak --minutes 1 --quick --splice`, its faults back to back,
about 100 s, with net.splice on): no record lost, duplicated or misordered, no response out of
order and no wrong decision while a broker restarts, the controller crashes, leaders move, the
policy reloads, the cluster state hangs and a worker is killed, on its own cluster (ports
20092+) and proxy (20700+). The faults outlast the minute, so no steady tail follows them:
`make soak` runs the long one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness import REPO

pytestmark = pytest.mark.integration


def test_the_quick_soak_loses_nothing_and_decides_right(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.soak",
            "--minutes",
            "1",
            "--quick",
            "--splice",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        cwd=REPO,
    )
    report_file = tmp_path / "soak.json"
    assert report_file.is_file(), result.stderr[-3000:]
    report = json.loads(report_file.read_text())
    records = report["records"]
    problems = [line for line in result.stderr.splitlines() if "FAILED" in line]
    assert result.returncode == 0, (problems, report)
    assert records["lost"] == records["duplicated"] == records["misordered"] == 0
    assert records["acknowledged"] > 10_000  # the traffic really flowed through the faults
    assert report["misordered_responses"] == 0
    assert report["wrong_decision_count"] == 0
    assert report["fail_closed_denials_during_hang"] > 0
    assert report["reloads"] >= 3 and report["reload_mismatches"] == []
    assert report["admin_rounds"] > 10
    assert [name for _, name in report["phases"] if name != "steady"] == [
        "warmup",
        "rolling-restart",
        "controller-crash",
        "election",
        "state-hang",
        "worker-kill",
        "drain",
    ]
    assert (tmp_path / "soak-rss.png").stat().st_size > 0
    assert report["proxy_exit_code"] == 0
    assert report["splice"] is True
