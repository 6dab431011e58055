"""Which broker ports some processes connect to: the proof that clients never bypass the proxy."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from pathlib import Path


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        pass
    return inodes


def _tcp_remote_ports(inodes: set[str]) -> set[int]:
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[9] in inodes:
                ports.add(int(fields[2].rsplit(":", 1)[1], 16))
    return ports


class BrokerConnectionWatcher:
    """Samples the TCP connections of some processes and records any to a broker port.

    Sockets that already exist when watching starts are left out: other tests in the same
    process may hold direct broker connections on purpose (to check the brokers' view).
    """

    def __init__(self, broker_ports: Iterable[int], pids: Iterable[int] = ()) -> None:
        self.broker_ports = set(broker_ports)
        self.pids = {os.getpid(), *pids}
        self.seen_ports: set[int] = set()
        self.violations: set[int] = set()
        self._baseline: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> BrokerConnectionWatcher:
        self._baseline = _socket_inodes(os.getpid())
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def watch(self, pid: int) -> None:
        """Also watch this process (e.g. a Java CLI tool)."""
        self.pids.add(pid)

    def sample(self) -> None:
        """Look at the watched processes' connections once."""
        inodes: set[str] = set()
        for pid in list(self.pids):
            inodes |= _socket_inodes(pid)
        ports = _tcp_remote_ports(inodes - self._baseline)
        self.seen_ports |= ports
        self.violations |= ports & self.broker_ports

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.sample()
