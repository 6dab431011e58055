"""The supervisor's /readyz reads what each worker reports; `--workers` parses as documented."""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kafka_policy_proxy.cli.run_command import _workers
from kafka_policy_proxy.proxy.config import build_config
from kafka_policy_proxy.proxy.runtime.workers import METRICS_ENV, Supervisor, worker_command


@dataclass
class FakeProcess:
    pid: int
    returncode: int | None = None


def supervisor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Supervisor:
    monkeypatch.setenv(METRICS_ENV, str(tmp_path))
    config = build_config({"upstream": {"bootstrap_servers": ["b:9092"]}}, None)
    return Supervisor(config, 3, ["run"])


def report(tmp_path: Path, pid: int, reasons: list[str], age: float = 0.0) -> None:
    text = json.dumps({"reasons": reasons, "time": time.time() - age})
    (tmp_path / f"readiness-{pid}.json").write_text(text)


def test_ready_only_when_every_worker_reports_ready(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sup = supervisor(tmp_path, monkeypatch)
    workers: dict[int, Any] = {1: FakeProcess(101), 2: FakeProcess(102), 3: FakeProcess(103)}
    sup._workers = workers
    for pid in (101, 102, 103):
        report(tmp_path, pid, [])
    assert sup.readiness() == []
    report(tmp_path, 102, ["the policy x is not loaded"])
    report(tmp_path, 103, [], age=30)
    workers[1].returncode = -9
    assert sup.readiness() == [
        "worker 1: not running",
        "worker 2: the policy x is not loaded",
        "worker 3: no report for 30s",
    ]
    (tmp_path / "readiness-103.json").unlink()
    assert "worker 3: no readiness report yet" in sup.readiness()


def test_workers_argument() -> None:
    assert _workers("3") == 3
    assert _workers("auto") == "auto"  # resolved by `run` (proxy/runtime/cpus.py)
    for bad in ("0", "-1", "two"):
        with pytest.raises(argparse.ArgumentTypeError, match="an integer of at least 1, or auto"):
            _workers(bad)


def test_workers_config_key() -> None:
    def workers(value: Any) -> int | str:
        return build_config(
            {"upstream": {"bootstrap_servers": ["b:9092"]}, "workers": value}, None
        ).workers

    assert workers(2) == 2
    assert workers("2") == 2  # as the environment gives it
    assert workers("auto") == "auto"
    for bad in (0, 257, "all"):
        with pytest.raises(Exception, match="workers"):
            workers(bad)


def test_a_worker_is_started_with_a_command_that_runs(tmp_path: Path) -> None:
    # What the supervisor starts for each worker, run from outside the checkout.
    ran = subprocess.run(
        worker_command(["run", "--help"]),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "--workers" in ran.stdout, ran.stdout
