"""The policy in force: loaded at start, swapped on SIGHUP or when its file changes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import structlog

from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.loader import PolicyError, load_policy
from kafka_policy_proxy.proxy.metrics import (
    POLICY_RELOAD_SUCCESS_TIME,
    POLICY_RELOAD_SUCCESSFUL,
    POLICY_RELOADS,
    policy_exceptions,
    policy_revision,
)

log = structlog.get_logger("proxy.policy")
# Longer than any judgement takes (cluster-state reads time out well within it).
RETIRED_FOR_S = 120.0


class PolicySource:
    """Holds the compiled policy; an invalid new file is refused and the old policy stays."""

    def __init__(
        self,
        path: Path,
        clock: Callable[[], float] = time.monotonic,
        last_good: Path | None = None,
    ) -> None:
        self.path = path
        # Under --workers: where each worker keeps the text of the policy it last loaded, so
        # that a worker started again after a crash runs what its siblings run, even if the
        # file was replaced by one that is refused meanwhile.
        self._last_good = last_good
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
        text = self.path.read_text()
        # exception_policy.max_days counts from now: time passing never refuses a file that
        # was accepted (an expiry only comes nearer), and an expired exception loads: it
        # waives nothing, and a restart must not break enforcement for it.
        policy = load_policy(text, str(self.path), base_dir=self.path.parent, now=datetime.now(UTC))
        self._keep_last_good(text)
        return self._install(policy, stamp)

    def start(self) -> CompiledPolicy:
        """Load the file at start; a restarted worker falls back to the last good policy."""
        try:
            return self.load()
        except (PolicyError, OSError) as exc:
            if self._last_good is None or not self._last_good.is_file():
                raise
            log.error(
                "policy file refused at start; running the last policy the workers loaded",
                file=str(self.path),
                detail=str(exc),
            )
            text = self._last_good.read_text()
            policy = load_policy(text, str(self.path), base_dir=self.path.parent)
            # The refused file is not retried until it changes, as on a reload.
            stamp = None
            with contextlib.suppress(OSError):
                stamp = self._file_stamp()
            installed = self._install(policy, stamp)
            POLICY_RELOAD_SUCCESSFUL.set(0)  # the file in place is still refused
            return installed

    def _keep_last_good(self, text: str) -> None:
        if self._last_good is None:
            return
        temporary = self._last_good.with_name(f"{self._last_good.name}.{os.getpid()}.tmp")
        temporary.write_text(text)
        temporary.replace(self._last_good)

    def _install(
        self, policy: CompiledPolicy, stamp: tuple[int, int, int] | None
    ) -> CompiledPolicy:
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
        POLICY_RELOAD_SUCCESS_TIME.set(time.time())
        POLICY_RELOAD_SUCCESSFUL.set(1)
        log.info(
            "policy loaded",
            file=str(self.path),
            rules=len(policy.rule_names),
            revision=policy.revision,
        )
        expired = policy.exceptions.expired(datetime.now(UTC))
        if expired:
            log.warning(
                "policy exceptions already expired; they waive nothing",
                file=str(self.path),
                exceptions=[e.name for e in expired],
            )
        self.refresh_metrics()
        return policy

    def refresh_metrics(self) -> None:
        """Set the exception gauges (in force, seconds to expiry) for the policy in force."""
        if self._policy is not None:
            items = self._policy.exceptions.items
            policy_exceptions(((e.name, e.expires) for e in items), datetime.now(UTC))

    def reload(self) -> bool:
        """Reload the file; on any error, log it and keep the policy in force.

        A refused file is not retried until it changes again (the watcher would otherwise
        refuse it, and log it, every interval).
        """
        try:
            self.load()
        except (PolicyError, OSError) as exc:
            with contextlib.suppress(OSError):
                self._stamp = self._file_stamp()
            POLICY_RELOADS.labels(result="failed").inc()
            POLICY_RELOAD_SUCCESSFUL.set(0)
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
            self.refresh_metrics()  # seconds to expiry, and which exceptions are in force
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
