"""Budget turns: budget-affecting decisions serialized per budget key, from the fact read
through the broker's response.

A request that a budget judges takes the turn of every budget key it touches (budget name and
resolved `{user}`, in sorted order, so two requests never wait on each other crosswise): an
asyncio lock per key in the process and, with `--workers`, a file lock (fcntl.flock) per key in
the directory the supervisor shares with its workers. The holder reads usage fresh, is judged,
is forwarded, and gives the turn back when the broker's response has arrived (the cache
updated) or the connection ended. A turn is never kept longer than `hold_s`, and a request that
does not get its turn within `wait_s` is denied (fail closed).

The broker has answered before the turn is given back, but another broker's metadata may show
a new topic a moment later (KRaft propagates it). So the holder also writes what the broker
accepted into the turn's ledger (in memory, and in the lock file with workers), and the next
holder counts those changes until its own reads show them, or `LEDGER_S` has passed.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

import structlog

from kafka_policy_proxy.policy.budgets import RETENTION, BudgetKey
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.model import ConfigMap, TopicState
from kafka_policy_proxy.proxy.metrics import BUDGET_TURN_WAIT

log = structlog.get_logger("proxy.budgets")

# The environment variable naming the directory of the workers' lock files.
BUDGET_LOCKS_ENV = "KAFKA_POLICY_PROXY_BUDGET_LOCKS"
WAIT_S = 30.0
HOLD_S = 30.0
# How long an accepted change is counted by later holders whose reads do not show it yet.
LEDGER_S = 30.0
_POLL_S = (0.001, 0.002, 0.005, 0.01, 0.02)


class TurnTimeout(Exception):
    """A budget's turn was not had within the wait: the request is denied."""


Entry = dict[str, object]


class Turn:
    """The turns of one request's budget keys, held until `release()` (idempotent)."""

    def __init__(
        self, locks: BudgetLocks, keys: Sequence[BudgetKey], files: list[int], connection_id: int
    ) -> None:
        self._locks = locks
        self.keys = tuple(keys)
        self.connection_id = connection_id
        self._files = files
        self._released = False
        self.timer: asyncio.TimerHandle | None = None

    def _ledgers(self) -> list[tuple[BudgetKey, int | None]]:
        files: list[int | None] = list(self._files) or [None] * len(self.keys)
        return list(zip(self.keys, files, strict=True))

    def pending(self) -> list[TopicState]:
        """The changes earlier holders had accepted, as the topics' states after them."""
        now = time.time()
        states: dict[str, TopicState] = {}
        for key, fd in self._ledgers():
            for entry in self._locks.ledger(key, fd):
                if float(entry["until"]) > now:  # type: ignore[arg-type]
                    states[str(entry["name"])] = _state(entry)
        return list(states.values())

    def record(self, states: Iterable[TopicState]) -> None:
        """What the broker accepted: later holders count it until their reads show it."""
        until = time.time() + LEDGER_S
        entries = [_entry(s, until) for s in states]
        if entries and not self._released:
            for key, fd in self._ledgers():
                self._locks.write_ledger(key, fd, entries)

    def release(self) -> None:
        """Give the turns back (after the response, a close, a failure or the hold's end)."""
        if self._released:
            return
        self._released = True
        if self.timer is not None:
            self.timer.cancel()
        self._locks.released(self)
        for fd in self._files:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


class BudgetLocks:
    """The process's budget turns; `directory` holds the lock files shared with other workers."""

    def __init__(
        self, directory: Path | None = None, *, wait_s: float = WAIT_S, hold_s: float = HOLD_S
    ) -> None:
        self._directory = directory
        self._wait_s = wait_s
        self._hold_s = hold_s
        self._locks: dict[BudgetKey, asyncio.Lock] = {}
        # Requests waiting for each key's lock: a lock nobody holds or awaits is dropped.
        self._waiting: dict[BudgetKey, int] = {}
        self._ledgers: dict[BudgetKey, list[Entry]] = {}
        self._by_connection: dict[int, set[Turn]] = {}

    @classmethod
    def from_environment(cls) -> BudgetLocks:
        """Shared between workers when the supervisor named a directory, else in-process."""
        value = os.environ.get(BUDGET_LOCKS_ENV)
        if value:
            Path(value).mkdir(parents=True, exist_ok=True)
        return cls(Path(value) if value else None)

    async def acquire(self, keys: Sequence[BudgetKey], connection_id: int) -> Turn:
        """The turns of these keys (sorted by the caller); TurnTimeout after `wait_s`."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + self._wait_s
        held: list[asyncio.Lock] = []
        files: list[int] = []
        try:
            for key in keys:
                lock = self._locks.setdefault(key, asyncio.Lock())
                self._waiting[key] = self._waiting.get(key, 0) + 1
                try:
                    await asyncio.wait_for(lock.acquire(), max(0.0, deadline - loop.time()))
                finally:
                    self._waiting[key] -= 1
                    if not self._waiting[key]:
                        del self._waiting[key]
                held.append(lock)
                if self._directory is not None:
                    files.append(await self._flock(key, deadline))
        except (TimeoutError, TurnTimeout):
            self._undo(held, files)
            names = ", ".join(k.text for k in keys)
            raise TurnTimeout(
                f"budget {names}: another request held its turn for over {self._wait_s:g} s"
            ) from None
        except BaseException:
            self._undo(held, files)
            raise
        BUDGET_TURN_WAIT.observe(loop.time() - started)
        turn = Turn(self, keys, files, connection_id)
        self._by_connection.setdefault(connection_id, set()).add(turn)
        turn.timer = loop.call_later(self._hold_s, self._expire, turn)
        return turn

    def close_connection(self, connection_id: int) -> None:
        """The connection ended: every turn it held is given back."""
        for turn in list(self._by_connection.get(connection_id, ())):
            turn.release()

    def ledger(self, key: BudgetKey, fd: int | None) -> list[Entry]:
        """The key's ledger: the lock file's with workers, else the process's."""
        if fd is None:
            return self._ledgers.get(key, [])
        os.lseek(fd, 0, os.SEEK_SET)
        raw = b""
        while chunk := os.read(fd, 65536):
            raw += chunk
        try:
            entries = json.loads(raw) if raw else []
        except ValueError:
            return []
        return entries if isinstance(entries, list) else []

    def write_ledger(self, key: BudgetKey, fd: int | None, entries: list[Entry]) -> None:
        """Add entries to the key's ledger, dropping what has expired."""
        now = time.time()
        kept = [e for e in self.ledger(key, fd) if float(e["until"]) > now]  # type: ignore[arg-type]
        kept += entries
        if fd is None:
            self._ledgers[key] = kept
            return
        data = json.dumps(kept).encode()
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, data)

    def released(self, turn: Turn) -> None:
        """Bookkeeping when a turn ends: the in-process locks go back."""
        turns = self._by_connection.get(turn.connection_id)
        if turns is not None:
            turns.discard(turn)
            if not turns:
                del self._by_connection[turn.connection_id]
        for key in turn.keys:
            lock = self._locks.get(key)
            if lock is not None and lock.locked():
                lock.release()
                if not lock.locked() and key not in self._waiting:
                    # Unused: dropped, so that per-user keys do not pile up.
                    del self._locks[key]

    def _expire(self, turn: Turn) -> None:
        log.warning("budget turn held too long; given back", keys=[k.text for k in turn.keys])
        turn.release()

    async def _flock(self, key: BudgetKey, deadline: float) -> int:
        assert self._directory is not None
        digest = hashlib.sha256(f"{key.name}\0{key.user}".encode()).hexdigest()[:24]
        fd = os.open(self._directory / f"budget-{digest}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        loop = asyncio.get_running_loop()
        attempt = 0
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                if loop.time() >= deadline:
                    os.close(fd)
                    raise TurnTimeout from None
                await asyncio.sleep(_POLL_S[min(attempt, len(_POLL_S) - 1)])
                attempt += 1
            except BaseException:
                os.close(fd)
                raise

    def _undo(self, held: list[asyncio.Lock], files: list[int]) -> None:
        for fd in files:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        for lock in held:
            lock.release()


def _entry(state: TopicState, until: float) -> Entry:
    return {
        "name": state.name,
        "partitions": state.partitions,
        "replication_factor": state.replication_factor,
        "retention": state.configs.get(RETENTION),
        "until": until,
    }


def _state(entry: Entry) -> TopicState:
    retention = entry.get("retention")
    configs = {} if retention is None else {RETENTION: str(retention)}
    return TopicState(
        str(entry["name"]),
        partitions=int(entry["partitions"]),  # type: ignore[call-overload]
        replication_factor=int(entry["replication_factor"]),  # type: ignore[call-overload]
        configs=ConfigMap(configs),
    )


def with_pending(cluster: InMemoryCluster, pending: Sequence[TopicState]) -> InMemoryCluster:
    """The cluster with what earlier holders changed and the reads do not show yet: a topic
    missing is added, fewer partitions are raised, a different retention.bytes is replaced."""
    if not pending:
        return cluster
    topics = {t.name: t for t in cluster.topics}
    for state in pending:
        shown = topics.get(state.name)
        if shown is None:
            topics[state.name] = state
            continue
        if shown.partitions < state.partitions:
            shown = replace(shown, partitions=state.partitions)
        retention = state.configs.get(RETENTION)
        if retention is not None and shown.configs.get(RETENTION) != retention:
            shown = replace(shown, configs=shown.configs.merged({RETENTION: retention}))
        topics[state.name] = shown
    return InMemoryCluster(tuple(topics.values()), cluster.brokers, cluster.defaults)
