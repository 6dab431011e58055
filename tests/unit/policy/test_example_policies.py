"""Every example policy loads, and every `message:` says what its author wrote.

YAML ends a plain scalar at " #": `message: ask #data-platform` loads as "ask". So a plain
message may not be followed by anything on its line; one with a `#` (or a comment after it)
must be quoted.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from kafka_policy_proxy.policy.loader import load_policy

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE_FILES = sorted((ROOT / "examples").rglob("*.yaml"))
DOCS = sorted((ROOT / "docs").glob("*.md"))
_YAML_BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.MULTILINE | re.DOTALL)


def doc_blocks() -> list[tuple[str, str]]:
    return [
        (f"{doc.name} block {n}", block)
        for doc in DOCS
        for n, block in enumerate(_YAML_BLOCK.findall(doc.read_text()))
    ]


def cut_messages(text: str) -> list[str]:
    """The plain `message` scalars that something follows on their last line."""
    found: list[str] = []
    nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    while nodes:
        node = nodes.pop()
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if key.value == "message" and isinstance(value, yaml.ScalarNode):
                    rest = text[value.end_mark.index :].split("\n", 1)[0].strip()
                    if value.style is None and rest and rest[0] not in ",}]":
                        found.append(f"line {value.start_mark.line + 1}: {value.value!r} {rest}")
                nodes.append(value)
        elif isinstance(node, yaml.SequenceNode):
            nodes.extend(node.value)
    return found


def is_policy(data: object) -> bool:
    return isinstance(data, dict) and bool({"rules", "plugins"} & set(data))


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_example_files_keep_their_messages(path: Path) -> None:
    text = path.read_text()
    assert cut_messages(text) == []
    if any(is_policy(doc) for doc in yaml.safe_load_all(text)):
        policy = load_policy(text, str(path))
        written = re.findall(r"^\s*message: \"(.*)\"$|^\s*message: ([^\"'#\n]*)$", text, re.M)
        assert [r.message for r in policy.document.rules if r.message] == [
            quoted or plain.strip() for quoted, plain in written
        ]


@pytest.mark.parametrize(("where", "block"), doc_blocks(), ids=lambda v: str(v)[:40])
def test_doc_blocks_keep_their_messages(where: str, block: str) -> None:
    assert cut_messages(block) == [], where


def test_the_protected_topic_message_keeps_its_channel() -> None:
    policy = load_policy((ROOT / "examples/policy.yaml").read_text(), "policy.yaml")
    messages = {r.name: r.message for r in policy.document.rules}
    assert messages["protected-topics"] == "protected topic; ask #data-platform"


def test_a_cut_message_is_caught() -> None:
    assert cut_messages("rules:\n  - name: a\n    message: ask #data-platform\n") == [
        "line 3: 'ask' #data-platform"
    ]
    assert cut_messages("rules:\n  - {name: a, message: ok}\n") == []
    assert cut_messages("rules:\n  - name: a\n    message: 'ask #x'  # why\n") == []
