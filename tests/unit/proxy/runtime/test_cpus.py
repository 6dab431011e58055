"""`workers: auto`: the CPUs a process may use, from its affinity and its cgroup's CPU quota."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kafka_policy_proxy.proxy.runtime.cpus import usable_cpus


def _cgroup(root: Path, relative: str, files: dict[str, str]) -> None:
    directory = root / relative
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text + "\n")


def _membership(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "proc-self-cgroup"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("cpu_max", "expected"),
    [
        ("max 100000", 8),  # no quota: the affinity
        ("200000 100000", 2),
        ("150000 100000", 2),  # 1.5 CPUs: rounded up
        ("50000 100000", 1),  # half a CPU: at least one worker
        ("1600000 100000", 8),  # a quota above the affinity: the affinity
    ],
)
def test_cgroup_v2_quota(tmp_path: Path, cpu_max: str, expected: int) -> None:
    root = tmp_path / "cgroup"
    _cgroup(root, "", {"cpu.max": cpu_max})
    cpus = usable_cpus(root, _membership(tmp_path, "0::/\n"), affinity=8)
    assert cpus.count == expected
    assert ("cpu.max" in cpus.source) == (cpu_max != "max 100000")


def test_the_tightest_quota_on_the_way_to_the_root_wins(tmp_path: Path) -> None:
    # A pod's limit sits on the pod's cgroup; its container's cgroup, below, has none.
    root = tmp_path / "cgroup"
    _cgroup(root, "", {"cpu.max": "max 100000"})
    _cgroup(root, "kubepods/pod1", {"cpu.max": "300000 100000"})
    _cgroup(root, "kubepods/pod1/ctr", {"cpu.max": "max 100000"})
    membership = _membership(tmp_path, "0::/kubepods/pod1/ctr\n")
    cpus = usable_cpus(root, membership, affinity=16)
    assert cpus.count == 3
    assert "kubepods/pod1/cpu.max" in cpus.source
    assert "300000 100000" in cpus.source


def test_without_a_cgroup_namespace_the_mount_root_is_the_containers(tmp_path: Path) -> None:
    # /proc/self/cgroup names the host's path, which the container's mount does not have.
    root = tmp_path / "cgroup"
    _cgroup(root, "", {"cpu.max": "100000 100000"})
    membership = _membership(tmp_path, "0::/system.slice/docker-abc.scope\n")
    assert usable_cpus(root, membership, affinity=4).count == 1


def test_cgroup_v1_quota(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    _cgroup(root, "cpu", {"cpu.cfs_quota_us": "-1", "cpu.cfs_period_us": "100000"})
    _cgroup(root, "cpu/docker/abc", {"cpu.cfs_quota_us": "250000", "cpu.cfs_period_us": "100000"})
    membership = _membership(tmp_path, "4:cpu,cpuacct:/docker/abc\n1:name=systemd:/\n")
    cpus = usable_cpus(root, membership, affinity=8)
    assert cpus.count == 3
    assert "cgroup v1" in cpus.source


def test_no_quota_anywhere_is_the_affinity(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    _cgroup(root, "cpu", {"cpu.cfs_quota_us": "-1", "cpu.cfs_period_us": "100000"})
    cpus = usable_cpus(root, _membership(tmp_path, "1:cpu:/\n0::/\n"), affinity=6)
    assert cpus.count == 6
    assert "affinity" in cpus.source
    # Nothing readable at all (no /sys/fs/cgroup, no /proc): still the affinity.
    assert usable_cpus(tmp_path / "none", tmp_path / "none", affinity=2).count == 2


def test_the_affinity_caps_auto_in_a_real_process() -> None:
    # taskset pins the command to one CPU: `workers: auto` must not count the host's cores.
    code = (
        "from kafka_policy_proxy.proxy.runtime.cpus import usable_cpus;print(usable_cpus().count)"
    )
    taskset = Path("/usr/bin/taskset")
    assert taskset.exists(), "taskset is missing: apt-get install util-linux"
    ran = subprocess.run(
        [str(taskset), "-c", "0", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert ran.stdout.strip() == "1"
