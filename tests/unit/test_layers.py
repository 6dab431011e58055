"""The floor plan: every arrow between rooms points down, and no module imports itself round.

Each room may import the rooms it stands on (ROOMS), and through them, everything below
those. docs/architecture.md draws the same plan. Imports inside functions and under
TYPE_CHECKING count too. Every import of the product goes through its one namespace,
kafka_policy_proxy (a bare `policy` or `proxy` would load a second copy, or another
distribution's package). The harness (dev and tests only) is never imported by product
code, no bench imports a test, and nothing edits sys.path or loads a module by file path.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "kafka_policy_proxy"
# The folders the namespace links (kafka_policy_proxy/<folder> -> ../<folder>).
PRODUCT = ("cli", "codec", "policy", "proxy", "pipeline")
DEV_ONLY = ("harness", "tests", "bench")

# Room -> the rooms directly under it. A module belongs to the room of its longest prefix.
ROOMS: dict[str, frozenset[str]] = {
    "codec": frozenset(),
    "policy": frozenset({"codec"}),
    "policy.offline": frozenset({"policy"}),
    "proxy.identity": frozenset({"codec"}),
    "proxy.metrics": frozenset({"codec"}),
    # The filter API (context in, verdict out) stands apart from the filters, as in Kroxylicious.
    "proxy.filters.api": frozenset({"codec"}),
    "proxy.config": frozenset({"proxy.identity"}),
    "proxy.tls": frozenset({"proxy.config", "proxy.metrics"}),
    # Kafka client properties -> ClientSecurity, for every connection the proxy makes itself.
    "proxy.kafka_client": frozenset({"proxy.config", "proxy.metrics"}),
    "proxy.cluster": frozenset({"proxy.tls", "proxy.kafka_client", "policy"}),
    "proxy.audit": frozenset(
        {"proxy.kafka_client", "proxy.metrics", "proxy.filters.api", "policy"}
    ),
    # Fair turns and rates for guarded work (sans-IO queue discipline, thin asyncio wrapper).
    "proxy.admission": frozenset({"proxy.metrics"}),
    "proxy.filters": frozenset(
        {"proxy.filters.api", "proxy.audit", "proxy.cluster", "proxy.admission"}
    ),
    "proxy.net": frozenset({"proxy.filters", "proxy.tls"}),
    "proxy.runtime": frozenset({"proxy.net"}),
    # The Spark package: its root holds the session and what a worker keeps between batches.
    "pipeline": frozenset({"policy.offline"}),
    "pipeline.sources": frozenset({"policy.offline"}),
    "pipeline.rendering": frozenset(),
    "pipeline.jobs": frozenset({"pipeline", "pipeline.sources", "pipeline.rendering"}),
    "cli": frozenset({"proxy.runtime", "pipeline.jobs"}),
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


def room_of(module: str) -> str | None:
    """The room a module of the namespace belongs to: its longest prefix in ROOMS."""
    if not module.startswith(f"{NAMESPACE}."):
        return None
    parts = module.split(".")[1:]
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in ROOMS:
            return prefix
    return None


@cache
def below(room: str) -> frozenset[str]:
    """Every room `room` may import: the rooms it stands on, and theirs, all the way down."""
    found: set[str] = set()
    for under in ROOMS[room]:
        found |= {under, *below(under)}
    return frozenset(found)


def module_name(source: Path) -> str:
    """The dotted module name of a file under ROOT."""
    parts = source.relative_to(ROOT).with_suffix("").parts
    dotted = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    return f"{NAMESPACE}.{dotted}" if parts[0] in PRODUCT else dotted


def sources(*packages: str) -> list[Path]:
    """The Python files of the given top-level folders."""
    return [path for package in packages for path in sorted((ROOT / package).rglob("*.py"))]


def test_every_product_module_has_a_room() -> None:
    homeless = [
        str(source.relative_to(ROOT))
        for source in sources(*PRODUCT)
        if not room_of(module_name(source)) and source.read_text(encoding="utf-8").strip()
    ]
    assert not homeless, f"add a room to ROOMS for: {homeless}"


def test_the_rooms_stand_on_each_other_without_a_circle() -> None:
    circular = [room for room in ROOMS if room in below(room)]
    assert not circular, f"rooms below themselves: {circular}"


@pytest.mark.parametrize("package", PRODUCT)
def test_every_arrow_points_down(package: str) -> None:
    arrows = []
    for source in sources(package):
        home = room_of(module_name(source))
        if home is None:  # an empty package marker: test_every_product_module_has_a_room
            continue
        for line, module in sorted(imported_modules(source)):
            target = room_of(module)
            if module.split(".")[0] in PRODUCT:
                arrows.append(f"{source.relative_to(ROOT)}:{line} imports {module} (bare)")
            elif module.split(".")[0] in DEV_ONLY:
                arrows.append(f"{source.relative_to(ROOT)}:{line} imports {module} (dev only)")
            elif target is not None and target != home and target not in below(home):
                arrows.append(f"{source.relative_to(ROOT)}:{line} {home} -> {target} ({module})")
    assert not arrows, "arrows that do not point down (see ROOMS):\n" + "\n".join(arrows)


def _module_graph() -> dict[str, set[str]]:
    modules = {module_name(source): source for source in sources(*PRODUCT)}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, source in modules.items():
        graph[name] = {m for _, m in imported_modules(source) if m in modules and m != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_round() -> None:
    circles = cycles(_module_graph())
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_the_checks_see_circles_and_imports_inside_functions(tmp_path: Path) -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    source = tmp_path / "lazy.py"
    source.write_text("def f():\n    from kio.serial import _introspect\n    import proxy.net\n")
    assert {m for _, m in imported_modules(source)} >= {"kio.serial._introspect", "proxy.net"}
    assert room_of(f"{NAMESPACE}.proxy.filters.api") == "proxy.filters.api"
    assert room_of(f"{NAMESPACE}.proxy.filters.topic_policy") == "proxy.filters"
    assert room_of("proxy.filters.api") is None  # bare: not the product's
    assert "codec" in below("cli")


def _calls(files: Iterable[Path]) -> list[str]:
    """Every sys.path edit and load by file path in `files`, as path:line."""
    found = []
    for source in files:
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"), str(source))):
            text = ast.unparse(node) if isinstance(node, ast.Attribute) else ""
            if text in ("sys.path", "importlib.util.spec_from_file_location") or (
                isinstance(node, ast.alias) and node.name == "spec_from_file_location"
            ):
                found.append(f"{source.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}")
    return found


def test_nothing_edits_sys_path_or_loads_a_module_by_file_path() -> None:
    tree = [*sources(*PRODUCT, *DEV_ONLY, "scripts")]
    assert not _calls(tree), "import the module instead (harness/ for dev code):\n" + "\n".join(
        _calls(tree)
    )


def test_every_import_of_the_product_goes_through_its_namespace() -> None:
    bare = [
        f"{source.relative_to(ROOT)}:{line} imports {module}"
        for source in sources(*PRODUCT, *DEV_ONLY)
        for line, module in sorted(imported_modules(source))
        if module.split(".")[0] in PRODUCT
    ]
    assert not bare, f"import {NAMESPACE}.<folder>..., never the bare folder:\n" + "\n".join(bare)


def test_the_namespace_links_every_folder_and_nothing_else() -> None:
    linked = {path.name: path for path in (ROOT / NAMESPACE).iterdir() if path.is_symlink()}
    assert sorted(linked) == sorted(PRODUCT)
    assert all(path.resolve() == ROOT / path.name for path in linked.values())


def test_no_bench_imports_a_test() -> None:
    arrows = [
        f"{source.relative_to(ROOT)}:{line} imports {module}"
        for source in sources("bench")
        for line, module in sorted(imported_modules(source))
        if module.split(".")[0] == "tests"
    ]
    assert not arrows, "move what bench needs into harness/:\n" + "\n".join(arrows)


def test_private_kio_modules_only_through_the_adapter() -> None:
    private = [
        f"{source.relative_to(ROOT)}:{line} imports {module}"
        for source in sources(*PRODUCT, *DEV_ONLY)
        if source.relative_to(ROOT) != KIO_ADAPTER
        for line, module in sorted(imported_modules(source))
        if module.startswith("kio.") and any(part.startswith("_") for part in module.split("."))
    ]
    assert not private, f"import kio's private modules through {KIO_ADAPTER} only:\n" + "\n".join(
        private
    )
