"""The layering rules: no arrow from a lower layer up to the ones built on it.

codec/ and policy/ import neither proxy/ nor pipeline/; proxy/ never imports pipeline/; no
layer imports the command line above them all; kio's private modules are reached only through
codec/kio_introspect.py. Imports inside functions count too.
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
KIO_ADAPTER = Path("codec/kio_introspect.py")


def imported_modules(source: Path) -> set[tuple[int, str]]:
    """(line, dotted module) for every absolute import in a file (imported names included)."""
    found: set[tuple[int, str]] = set()
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"), str(source))):
        if isinstance(node, ast.Import):
            found.update((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from a import b` may import module a.b: both count.
            found.add((node.lineno, node.module))
            found.update((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)
    return found


def imported_packages(source: Path) -> set[tuple[int, str]]:
    """(line, top-level package) for every absolute import in a file."""
    return {(line, module.split(".")[0]) for line, module in imported_modules(source)}


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
    source.write_text(
        "def f():\n    from kio.serial import _introspect\n    import proxy.runtime.server\n"
    )
    assert imported_packages(source) == {(2, "kio"), (3, "proxy")}
    assert (2, "kio.serial._introspect") in imported_modules(source)


def test_private_kio_modules_only_through_the_adapter() -> None:
    sources = []
    for directory in (*FORBIDDEN, COMMAND_LINE, "tests"):
        sources.extend(sorted((ROOT / directory).rglob("*.py")))
    private = [
        f"{source.relative_to(ROOT)}:{line} imports {module}"
        for source in sources
        if source.relative_to(ROOT) != KIO_ADAPTER
        for line, module in sorted(imported_modules(source))
        if module.startswith("kio.") and any(part.startswith("_") for part in module.split("."))
    ]
    assert not private, f"import kio's private modules through {KIO_ADAPTER} only:\n" + "\n".join(
        private
    )
