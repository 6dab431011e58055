"""`run` with `workers: auto` in a process pinned to one CPU: one worker, and the log says why."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

# This part's port range (18750-18799); nothing answers on the upstream port.
BOOTSTRAP_PORT, NODE_PORT_BASE, NO_BROKER = 18753, 18780, 18789


def test_workers_auto_counts_the_cpus_the_process_may_use(tmp_path: Path) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "listeners": {
                    "bind_host": "127.0.0.1",
                    "bootstrap_port": BOOTSTRAP_PORT,
                    "broker_port_base": NODE_PORT_BASE,
                },
                "upstream": {
                    "bootstrap_servers": [f"127.0.0.1:{NO_BROKER}"],
                    "connect_timeout_s": 1,
                },
                "logging": {"format": "json"},
                "workers": "auto",
            }
        )
    )
    taskset = Path("/usr/bin/taskset")
    assert taskset.exists(), "taskset is missing: apt-get install util-linux"
    script = Path(sys.executable).parent / "kafka-policy-proxy"
    log = tmp_path / "run.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(taskset), "-c", "0", str(script), "run", "--config", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 60
            while "proxy ready" not in log.read_text():
                assert process.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
        finally:
            process.send_signal(signal.SIGTERM)
            assert process.wait(30) == 0, log.read_text()
    events = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    [auto] = [e for e in events if e["event"] == "workers: auto"]
    assert auto["workers"] == 1
    # The affinity, unless this machine's cgroup quota is below one CPU.
    assert auto["source"].startswith("CPU affinity (1 CPUs)") or "rounded up" in auto["source"]
    # One process: no supervisor started workers.
    assert not any(e["event"] == "workers started" for e in events)
