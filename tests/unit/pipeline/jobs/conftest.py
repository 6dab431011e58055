"""The replay tests' inputs, made once per session: the tests only read them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.audit_data import example_cluster, write_events, write_snapshot
from tests.unit.pipeline.jobs.replay_inputs import recorded_events


@pytest.fixture(scope="session")
def events() -> list[dict[str, Any]]:
    """The recorded events (`recorded_events`)."""
    return recorded_events()


@pytest.fixture(scope="session")
def audit(events: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with the recorded events as one audit log."""
    directory = tmp_path_factory.mktemp("audit")
    write_events(directory / "audit.jsonl", events)
    return directory


@pytest.fixture(scope="session")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The snapshot of the cluster the events were judged in."""
    return write_snapshot(tmp_path_factory.mktemp("snapshot") / "s.jsonl", example_cluster())
