"""How the launcher talks to its user: progress lines on stderr, errors with an exit code."""

from __future__ import annotations

import sys


class LocalKafkaError(RuntimeError):
    """A launcher failure with a one-line message and the exit code the CLI should use."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def progress(message: str) -> None:
    """One progress line on stderr."""
    print(f"local-kafka: {message}", file=sys.stderr, flush=True)
