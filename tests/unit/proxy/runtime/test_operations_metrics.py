"""The metrics operators alert on: which build runs, and whether the policy file loaded."""

from __future__ import annotations

import platform
import time
from pathlib import Path

from prometheus_client import REGISTRY

from kafka_policy_proxy import __version__
from kafka_policy_proxy.proxy.runtime.policy_source import PolicySource

GUARD = "version: 1\nrules:\n  - {name: guard, deny: true}\n"
LAST_SUCCESS = "kpp_policy_reload_last_success_timestamp_seconds"
SUCCESSFUL = "kpp_policy_last_reload_successful"


def _value(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def test_build_info_names_the_installed_version_and_python() -> None:
    assert __version__ not in ("", "0+unknown")  # the distribution is installed (pip -e .)
    labels = {"version": __version__, "python": platform.python_version()}
    assert _value("kpp_build_info", **labels) == 1


def test_the_reload_timestamp_moves_on_success_only(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(GUARD)
    source = PolicySource(path)
    before = time.time()
    source.load()
    loaded = _value(LAST_SUCCESS)
    assert loaded is not None and before <= loaded <= time.time()
    assert _value(SUCCESSFUL) == 1

    path.write_text("rules: [{name: a")  # refused: the old policy stays, and so does its time
    assert source.reload() is False
    assert _value(LAST_SUCCESS) == loaded
    assert _value(SUCCESSFUL) == 0

    path.write_text(GUARD + "  - {name: second, deny: true}\n")
    assert source.reload() is True
    reloaded = _value(LAST_SUCCESS)
    assert reloaded is not None and reloaded >= loaded
    assert _value(SUCCESSFUL) == 1
    source.close()


def test_a_worker_restarted_on_the_last_good_policy_reports_the_file_refused(
    tmp_path: Path,
) -> None:
    path, last_good = tmp_path / "policy.yaml", tmp_path / "last-good.yaml"
    last_good.write_text(GUARD)
    path.write_text("rules: [{name: a")
    source = PolicySource(path, last_good=last_good)
    assert source.start().rule_names == ("guard",)
    assert _value(SUCCESSFUL) == 0
    source.close()
