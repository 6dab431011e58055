"""docs/policy.md's section on exceptions: its policy loads, and its commands print what it
shows (run at a fixed instant: the docs show a fixed date)."""

from __future__ import annotations

import re
import shlex
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from kafka_policy_proxy.cli.policy_command import main
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.policy.offline.scenario import parse_suite
from kafka_policy_proxy.policy.offline.suite import run_suite
from tests.unit.cli.test_policy_exceptions import NOW, _recorded

ROOT = Path(__file__).resolve().parents[3]
TEXT = (ROOT / "docs" / "policy.md").read_text()
SECTION = TEXT.split("## Exceptions that expire", 1)[1].split("\n## ", 1)[0]
BLOCKS = re.findall(r"^```(\w*)\n(.*?)^```", SECTION, re.MULTILINE | re.DOTALL)


def commands() -> list[tuple[list[str], str]]:
    """Each shown command (without the program name) and what it prints."""
    found = []
    for kind, block in BLOCKS:
        if kind or not block.startswith("$ "):
            continue
        command, _, output = block.replace("\\\n", "").partition("\n")
        found.append((shlex.split(command[2:])[1:], output))
    return found


def test_the_section_policy_loads_within_its_max_days() -> None:
    (policy,) = [block for kind, block in BLOCKS if kind == "yaml"]
    loaded = load_policy(policy, "docs", now=datetime(2026, 11, 29, tzinfo=UTC))
    assert [e.name for e in loaded.document.exceptions] == ["clickstream-backfill"]
    assert loaded.document.exception_policy is not None


def test_the_section_shows_both_commands() -> None:
    assert [argv[:2] for argv, _ in commands()] == [["policy", "check"], ["policy", "except"]]


@pytest.mark.parametrize(("argv", "shown"), commands(), ids=lambda v: str(v)[:30])
def test_a_shown_command_prints_what_the_docs_show(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    shown: str,
) -> None:
    monkeypatch.chdir(ROOT)
    if argv[1] == "except":
        audit, _, _ = _recorded(tmp_path)
        argv = [str(audit) if a == "audit.jsonl" else a for a in argv] + ["--now", NOW.isoformat()]
    assert main(argv) == 0
    assert capsys.readouterr().out == shown


def test_the_test_case_with_now_passes_against_the_example() -> None:
    (block,) = [b for b in re.findall(r"^```yaml\n(.*?)^```", TEXT, re.M | re.S) if "now:" in b]
    suite = parse_suite({"cases": yaml.safe_load(block)})
    policy = load_policy((ROOT / "examples" / "policy.yaml").read_text(), "policy.yaml")
    (result,) = run_suite(policy, suite)
    assert result.passed, result.failures
