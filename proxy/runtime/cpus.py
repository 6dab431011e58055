"""`workers: auto`: how many CPUs this process may actually use.

`os.cpu_count()` is the host's count; in a container it is not the CPU limit. The figure is
the CPUs this process may run on (its affinity), capped by the cgroup CPU quota of its cgroup
and every cgroup above it (v2 `cpu.max`, or v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`),
rounded up, and at least 1.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


@dataclass(frozen=True, slots=True)
class UsableCpus:
    """The CPU count `workers: auto` uses, and where it comes from (for the start log)."""

    count: int
    source: str


def usable_cpus(
    cgroup_root: Path = CGROUP_ROOT,
    proc_cgroup: Path = PROC_CGROUP,
    affinity: int | None = None,
) -> UsableCpus:
    """The CPUs this process may use: its affinity, capped by the cgroup CPU quota."""
    allowed = affinity if affinity is not None else len(os.sched_getaffinity(0))
    allowed = max(1, allowed)
    quota = _tightest_quota(cgroup_root, _memberships(proc_cgroup))
    if quota is None:
        return UsableCpus(allowed, f"CPU affinity ({allowed} CPUs), no cgroup CPU quota")
    cpus, where = quota
    if math.ceil(cpus) >= allowed:
        return UsableCpus(allowed, f"CPU affinity ({allowed} CPUs), under {where}")
    return UsableCpus(max(1, math.ceil(cpus)), f"{where} ({cpus:g} CPUs, rounded up)")


def _memberships(proc_cgroup: Path) -> dict[str, str]:
    """Controller ("" for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    found: dict[str, str] = {}
    try:
        text = proc_cgroup.read_text()
    except OSError:
        return found
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        for controller in controllers.split(",") if controllers else [""]:
            found[controller] = path
    return found


def _tightest_quota(root: Path, memberships: dict[str, str]) -> tuple[float, str] | None:
    """The smallest quota, in CPUs, on the way from this process's cgroup up to the root."""
    quotas = [
        *(_v2(d) for d in _ancestors(root, memberships.get("", "/"))),
        *(_v1(d) for d in _ancestors(root / "cpu", memberships.get("cpu", "/"))),
    ]
    found = [q for q in quotas if q is not None]
    return min(found, key=lambda q: q[0]) if found else None


def _ancestors(mount: Path, path: str) -> list[Path]:
    """The cgroup's directory and every one above it inside the mount.

    Without a cgroup namespace the path names the host's hierarchy, which a container's mount
    does not show: then only the mount's own root counts, which is the container's cgroup.
    """
    here = mount / path.strip("/")
    if not here.is_dir():
        return [mount]
    return [here, *(p for p in here.parents if p.is_relative_to(mount))]


def _v2(directory: Path) -> tuple[float, str] | None:
    try:
        quota, period = (directory / "cpu.max").read_text().split()
    except (OSError, ValueError):
        return None
    if quota == "max" or int(period) <= 0:
        return None
    return int(quota) / int(period), f"cgroup v2 {directory / 'cpu.max'} ({quota} {period})"


def _v1(directory: Path) -> tuple[float, str] | None:
    try:
        quota = int((directory / "cpu.cfs_quota_us").read_text())
        period = int((directory / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    if quota <= 0 or period <= 0:  # -1: no quota
        return None
    where = f"cgroup v1 {directory / 'cpu.cfs_quota_us'} ({quota}/{period})"
    return quota / period, where
