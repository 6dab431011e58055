"""The layering rules: no arrow from a lower layer up to the ones built on it.

codec/ and policy/ import neither proxy/ nor pipeline/; proxy/ never imports pipeline/; no
layer imports the command line above them all. Imports inside functions count too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMMAND_LINE = "kafka_policy_proxy"
FORBIDDEN = {
    "codec": {"proxy", "pipeline", COMMAND_LINE},
    "policy": {"proxy", "pipeline", COMMAND_LINE},
    "proxy": {"pipeline", COMMAND_LINE},
    "pipeline": {COMMAND_LINE},
}


def imported_packages(source: Path) -> set[tuple[int, str]]:
    """(line, top-level package) for every absolute import in a file."""
    found: set[tuple[int, str]] = set()
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"), str(source))):
        if isinstance(node, ast.Import):
            found.update((node.lineno, alias.name.split(".")[0]) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add((node.lineno, node.module.split(".")[0]))
    return found


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_nothing_above_it(layer: str) -> None:
    sources = sorted((ROOT / layer).rglob("*.py"))
    assert sources, f"no Python files under {layer}/"
    arrows = [
        f"{source.relative_to(ROOT)}:{line} imports {package}"
        for source in sources
        for line, package in sorted(imported_packages(source))
        if package in FORBIDDEN[layer]
    ]
    assert not arrows, f"{layer}/ must not import {sorted(FORBIDDEN[layer])}:\n" + "\n".join(arrows)


def test_the_check_sees_imports_inside_functions(tmp_path: Path) -> None:
    source = tmp_path / "lazy.py"
    source.write_text("def f():\n    from pipeline import cli\n    import proxy.server\n")
    assert imported_packages(source) == {(2, "pipeline"), (3, "proxy")}
