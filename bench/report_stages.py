"""The report's stages, timed in wall and CPU seconds of the whole process tree.

Run from the repository's root, on a lake that `pipeline ingest` wrote:

    .venv/bin/python -m bench.report_stages LAKE [--out DIR] [--master local[2]]

CPU seconds count the driver, its JVM and its Python workers (from /proc), so they hold
better than wall time on a loaded machine; a process that exits within a stage (an idle
Python worker) is not counted. Stages: the session, planning and listing the
rollups, summing each rollup table and collecting it, the facts, and the page. It prints one
JSON object: {stage: [wall_s, cpu_s]}.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

_TICKS = os.sysconf("SC_CLK_TCK")  # /proc counts CPU time in clock ticks


def tree_cpu(root: int) -> dict[int, float]:
    """CPU seconds (user and system, with reaped children's) used so far by `root` and each
    process under it, by pid."""
    children: dict[int, list[tuple[int, list[str]]]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone since the listing
        children.setdefault(int(fields[1]), []).append((int(entry.name), fields))
    own = os.times()
    used = {root: own.user + own.system + own.children_user + own.children_system}
    todo = [root]
    while todo:
        for pid, fields in children.get(todo.pop(), ()):
            used[pid] = sum(int(f) for f in fields[11:15]) / _TICKS
            todo.append(pid)
    return used


def used_since(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds the processes alive at `after` used since `before`."""
    # Per process: Spark's Python workers are reaped without their time reaching a parent
    # (SIGCHLD ignored), so a sum over the tree would drop when one exits.
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())


def _timed(stages: dict[str, list[float]], name: str, call: Callable[[], Any]) -> Any:
    cpu, wall = tree_cpu(os.getpid()), time.perf_counter()
    result = call()
    spent = used_since(cpu, tree_cpu(os.getpid()))
    stages[name] = [round(time.perf_counter() - wall, 1), round(spent, 1)]
    return result


def _wrapped(stages: dict[str, list[float]], module: Any, name: str) -> Iterator[None]:
    original = getattr(module, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        label = f"{name}:{args[0]}" if name == "_collect" else name
        return _timed(stages, label, lambda: original(*args, **kwargs))

    setattr(module, name, timed)
    try:
        yield
    finally:
        setattr(module, name, original)


def report_stages(spark: Any, lake: str, out: str) -> dict[str, list[float]]:
    """Run the report once on `lake` in `spark`, writing to `out`; each stage's [wall, CPU]."""
    from kafka_policy_proxy.pipeline.jobs import report, report_rollups
    from kafka_policy_proxy.pipeline.sources.audit_source import AuditSource

    stages: dict[str, list[float]] = {}
    hooks = [
        _wrapped(stages, report_rollups, "_frames"),
        _wrapped(stages, report_rollups, "_collect"),
        _wrapped(stages, report, "report_facts"),
        _wrapped(stages, report, "report_page"),
    ]
    for hook in hooks:
        next(hook)
    try:
        _timed(stages, "report", lambda: report.run_report(spark, AuditSource(lake=lake), out))
    finally:
        for hook in hooks:
            next(hook, None)
    return stages


def main() -> int:
    """Start a session and run the report once on a lake, timing each stage."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("lake")
    parser.add_argument("--out", help="the report's directory (default: a temporary one)")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    from kafka_policy_proxy.pipeline.session import spark_session

    session: dict[str, list[float]] = {}
    spark = _timed(session, "session", lambda: spark_session(master=args.master))
    with tempfile.TemporaryDirectory() as scratch:
        print(json.dumps(session | report_stages(spark, args.lake, args.out or scratch)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
