"""The policy in force: a new file that enforces nothing is refused and the old policy stays."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kafka_policy_proxy.policy.loader import PolicyError
from kafka_policy_proxy.policy.plugins import PolicyPlugin
from kafka_policy_proxy.proxy.runtime.policy_source import RETIRED_FOR_S, PolicySource

GUARD = "version: 1\nrules:\n  - {name: guard, deny: true}\n"


@pytest.mark.parametrize(
    "text", ["", "version: 1\nrules: []\n", "dry_run: true\n" + GUARD, "rules: [{name: a"]
)
def test_a_reload_that_would_disarm_keeps_the_policy_in_force(tmp_path: Path, text: str) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(GUARD)
    source = PolicySource(path)
    before = source.load()
    path.write_text(text)
    assert source.reload() is False
    assert source.current() is before
    # The file is still read: a policy that enforces replaces the old one.
    path.write_text(GUARD + "  - {name: second, deny: true}\n")
    assert source.reload() is True
    policy = source.current()
    assert policy is not None and policy.rule_names == ("guard", "second")
    source.close()


def test_the_first_load_refuses_a_policy_that_enforces_nothing(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("")
    with pytest.raises(PolicyError, match="set `enforce: nothing` at the top level"):
        PolicySource(path).load()


CLOSED: list[str] = []


class Recording(PolicyPlugin):
    """Records its close() by the name in its config."""

    def close(self) -> None:
        CLOSED.append(self.config["name"])


def test_a_replaced_policy_stays_open_while_a_request_may_still_use_it(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    now = [0.0]

    def write(name: str) -> None:
        path.write_text(
            GUARD + "plugins:\n  - name: rec\n"
            "    class: tests.unit.proxy.runtime.test_policy_source.Recording\n"
            f"    config: {{name: {name}}}\n"
        )

    CLOSED.clear()
    source = PolicySource(path, clock=lambda: now[0])
    write("first")
    first = source.load()
    write("second")
    source.reload()
    # A request that read `first` before the reload and awaits facts still evaluates it.
    assert CLOSED == []
    assert source.current() is not first
    now[0] = RETIRED_FOR_S + 1
    write("third")
    source.reload()
    assert CLOSED == ["first"]  # the second was replaced just now: still open
    source.close()
    assert sorted(CLOSED) == ["first", "second", "third"]


def test_a_restarted_worker_runs_the_last_good_policy_when_the_file_is_refused(
    tmp_path: Path,
) -> None:
    path = tmp_path / "policy.yaml"
    last_good = tmp_path / "policy.last-good.yaml"
    path.write_text(GUARD)
    first = PolicySource(path, last_good=last_good)
    loaded = first.load()
    assert last_good.read_text() == GUARD
    path.write_text("rules: [{name: a\n")  # refused by a reload, and by a fresh start
    assert first.reload() is False
    with pytest.raises(PolicyError):
        PolicySource(path).start()  # no fallback outside --workers: refuse to run
    again = PolicySource(path, last_good=last_good).start()
    assert again.revision == loaded.revision
    assert last_good.read_text() == GUARD  # a refused file never becomes the last good one
    first.close()


async def test_the_watcher_refuses_a_bad_file_once_not_every_interval(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(GUARD)
    source = PolicySource(path)
    source.load()
    path.write_text("rules: [{name: a\n")
    calls: list[bool] = []
    reload = source.reload
    source.reload = lambda: calls.append(reload()) or calls[-1]  # type: ignore[method-assign]
    watcher = asyncio.ensure_future(source.watch(interval=0.01))
    await asyncio.sleep(0.3)
    watcher.cancel()
    assert calls == [False]
    source.close()
