"""The policy in force: loaded at start, swapped on SIGHUP or when its file changes."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from pathlib import Path

import structlog

from policy.engine import CompiledPolicy
from policy.loader import PolicyError, load_policy
from proxy.metrics import POLICY_RELOADS, policy_revision

log = structlog.get_logger("proxy.policy")
# Longer than any judgement takes (cluster-state reads time out well within it).
RETIRED_FOR_S = 120.0


class PolicySource:
    """Holds the compiled policy; an invalid new file is refused and the old policy stays."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self._policy: CompiledPolicy | None = None
        self._stamp: tuple[int, int, int] | None = None
        self._clock = clock
        # Replaced policies, with when: a request judged across an await (a cluster-state
        # read) may still evaluate one, so its plugins and Java classes stay open a while.
        self._retired: list[tuple[float, CompiledPolicy]] = []

    def current(self) -> CompiledPolicy | None:
        """The policy in force."""
        return self._policy

    def load(self) -> CompiledPolicy:
        """Load the file now; raises PolicyError or OSError (used at start, to refuse to run)."""
        stamp = self._file_stamp()
        policy = load_policy(self.path.read_text(), str(self.path), base_dir=self.path.parent)
        old, self._policy, self._stamp = self._policy, policy, stamp
        now = self._clock()
        keep = [(when, p) for when, p in self._retired if now - when < RETIRED_FOR_S]
        for when, retired in self._retired:
            if now - when >= RETIRED_FOR_S:
                retired.close()
        self._retired = keep
        if old is not None:
            self._retired.append((now, old))
        policy_revision(policy.revision)
        log.info(
            "policy loaded",
            file=str(self.path),
            rules=len(policy.rule_names),
            revision=policy.revision,
        )
        return policy

    def reload(self) -> bool:
        """Reload the file; on any error, log it and keep the policy in force."""
        try:
            self.load()
        except (PolicyError, OSError) as exc:
            POLICY_RELOADS.labels(result="failed").inc()
            log.error(
                "policy reload refused; the previous policy stays in force",
                file=str(self.path),
                detail=str(exc),
            )
            return False
        POLICY_RELOADS.labels(result="ok").inc()
        return True

    async def watch(self, interval: float = 2.0) -> None:
        """Reload whenever the file's inode, modification time or size changes."""
        while True:
            await asyncio.sleep(interval)
            with contextlib.suppress(OSError):
                if self._file_stamp() != self._stamp:
                    self.reload()

    def close(self) -> None:
        """Close the policy's plugins and Java policies, and those of replaced policies."""
        for _, retired in self._retired:
            retired.close()
        self._retired = []
        if self._policy is not None:
            self._policy.close()

    def _file_stamp(self) -> tuple[int, int, int]:
        # The inode too: a Kubernetes ConfigMap update swaps a symlink to a new file, whose
        # mtime and size may equal the old one's.
        stat = self.path.stat()
        return stat.st_ino, stat.st_mtime_ns, stat.st_size
