"""Why a cluster fact could not be read: the error callers see, and the one reads raise inside."""

from __future__ import annotations


class ClusterStateUnavailable(Exception):
    """A cluster fact could not be read; the message says which and why."""


class ReadFailed(Exception):
    """A failure whose message is complete except for what was being read."""

    def __init__(self, message: str, *, retry: bool = False) -> None:
        super().__init__(message)
        self.retry = retry  # the connection broke: one more try on a new one may work
