"""The policy in force: loaded at start, swapped on SIGHUP or when its file changes."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import structlog

from policy.engine import CompiledPolicy
from policy.loader import PolicyError, load_policy
from proxy.metrics import POLICY_RELOADS, policy_revision

log = structlog.get_logger("proxy.policy")


class PolicySource:
    """Holds the compiled policy; an invalid new file is refused and the old policy stays."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._policy: CompiledPolicy | None = None
        self._stamp: tuple[int, int, int] | None = None

    def current(self) -> CompiledPolicy | None:
        """The policy in force."""
        return self._policy

    def load(self) -> CompiledPolicy:
        """Load the file now; raises PolicyError or OSError (used at start, to refuse to run)."""
        stamp = self._file_stamp()
        policy = load_policy(self.path.read_text(), str(self.path), base_dir=self.path.parent)
        old, self._policy, self._stamp = self._policy, policy, stamp
        if old is not None:
            old.close()
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
        """Close the policy's plugins."""
        if self._policy is not None:
            self._policy.close()

    def _file_stamp(self) -> tuple[int, int, int]:
        # The inode too: a Kubernetes ConfigMap update swaps a symlink to a new file, whose
        # mtime and size may equal the old one's.
        stat = self.path.stat()
        return stat.st_ino, stat.st_mtime_ns, stat.st_size
