"""The house's floors: `digest/` (pure functions) below `resources/` (the store, the model clients)
below `assets/` below `pipelines/` (jobs, sensors, schedules) below `app/` (the CLI, search, the MCP
server) below `bench/`. A module imports from its own floor or
below, never above: an import up a floor ties the floors into one circle (issue 36 found three,
one of them closing a cycle across three floors). Every import is read, those inside functions
and under `TYPE_CHECKING` too."""

from __future__ import annotations

import ast
import gc
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FLOORS = ("digest", "resources", "assets", "pipelines", "app", "bench")
PRODUCT = FLOORS[:-1]  # what is installed; `bench/` measures it


# The fields that hold a statement's statements: an import is a statement, so it is found by
# walking these alone, not the expressions that are most of a tree's nodes.
STATEMENT_LISTS = ("body", "orelse", "finalbody", "handlers", "cases")


def sources(root: Path, package: str) -> list[Path]:
    """The package's modules; not the old checkouts a benchmark leaves under `bench/out/`."""
    return sorted(p for p in (root / package).rglob("*.py") if p.relative_to(root / package).parts[0] != "out")


@cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


@pytest.fixture(scope="module", autouse=True)
def trees_uncollected() -> Iterator[None]:
    """The garbage collector waits while this module's tests parse, and the trees are let go when
    they end: hundreds of thousands of objects, in no cycle, that its full passes would walk again
    and again (about a second of CPU in the unit tier)."""
    gc.disable()
    try:
        yield
    finally:
        parsed.cache_clear()
        gc.enable()


def import_statements(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement in the tree, wherever it is."""
    found = []
    pending = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        for name in STATEMENT_LISTS:
            pending.extend(getattr(node, name, ()))
    return found


def imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in the tree, wherever it is, by line."""
    found = []
    for node in import_statements(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return sorted(found)


def imports_up_a_floor(root: Path) -> list[str]:
    """Each import of a module under `root` that climbs a floor, as `path:line imports module`."""
    climbing = []
    for floor, package in enumerate(FLOORS):
        for path in sources(root, package):
            for line, module in imported_modules(parsed(path)):
                top = module.split(".")[0]
                if top in FLOORS and FLOORS.index(top) > floor:
                    climbing.append(f"{path.relative_to(root)}:{line} imports {module}")
    return climbing


def test_no_module_imports_from_a_floor_above_its_own():
    assert imports_up_a_floor(REPO) == []


def test_an_import_up_a_floor_is_found_inside_a_function_too(tmp_path):
    for package in FLOORS:
        (tmp_path / package).mkdir()
    (tmp_path / "digest" / "pure.py").write_text("import json\nfrom digest.tags import SWEEP_TAG\n")
    (tmp_path / "resources" / "store.py").write_text("def f():\n    from pipelines.runs import sweep\n")
    (tmp_path / "assets" / "work.py").write_text("import resources.store\nimport pipelines.cli as cli\n")
    assert imports_up_a_floor(tmp_path) == [
        "resources/store.py:2 imports pipelines.runs",
        "assets/work.py:2 imports pipelines.cli",
    ]


MODULE_LINES = 600  # a module past this is two modules
README_LINES = 200  # the front page: detail goes to docs/


def test_every_module_and_the_front_page_keep_their_length():
    long = [
        f"{path.relative_to(REPO)}: {lines} lines"
        for package in PRODUCT
        for path in sources(REPO, package)
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MODULE_LINES
    ]
    readme = len((REPO / "README.md").read_text(encoding="utf-8").splitlines())
    assert long == [] and readme <= README_LINES, (long, f"README.md: {readme} lines")


def import_graph(root: Path) -> dict[str, set[str]]:
    """Each module of the installed floors under `root` and the modules of those floors it imports."""
    paths = {
        ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): path
        for package in PRODUCT
        for path in sources(root, package)
    }
    graph = {}
    for module, path in paths.items():
        named = set()
        for _, imported in imported_modules(parsed(path)):
            named.add(imported)
        for node in import_statements(parsed(path)):  # `from package import module`
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                named.update(f"{node.module}.{alias.name}" for alias in node.names)
        graph[module] = {m for m in named if m in paths and m != module}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The modules that import each other, directly or around a circle (each circle sorted)."""
    reaches = {module: set() for module in graph}
    for module in graph:
        stack = list(graph[module])
        while stack:
            found = stack.pop()
            if found not in reaches[module]:
                reaches[module].add(found)
                stack.extend(graph[found])
    circles = {tuple(sorted({m} | {o for o in reaches[m] if m in reaches[o]})) for m in graph if m in reaches[m]}
    return sorted(list(c) for c in circles)


def test_no_import_circle_inside_a_floor_or_across():
    assert import_circles(import_graph(REPO)) == []


def test_an_import_circle_through_imports_inside_functions_is_found(tmp_path):
    for package in PRODUCT:
        (tmp_path / package).mkdir()
    (tmp_path / "resources" / "connection.py").write_text("from resources import migrations\n")
    (tmp_path / "resources" / "migrations.py").write_text("def f():\n    from resources.facts import g\n")
    (tmp_path / "resources" / "facts.py").write_text("import resources.connection\n")
    (tmp_path / "resources" / "sessions.py").write_text("import resources.facts\n")
    assert import_circles(import_graph(tmp_path)) == [
        ["resources.connection", "resources.facts", "resources.migrations"]
    ]


def test_no_private_name_is_imported_from_another_module():
    private = [
        f"{path.relative_to(REPO)}:{node.lineno} imports {node.module}.{alias.name}"
        for package in PRODUCT
        for path in sources(REPO, package)
        for node in import_statements(parsed(path))
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in FLOORS
        for alias in node.names
        if alias.name.startswith("_")
    ]
    assert private == []


ASSET_BODY_LINES = 40  # an asset's body past this holds work for a plain function in assets/work/


def _is_asset(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
    return name in ("asset", "multi_asset", "graph_asset")


def long_asset_bodies(root: Path) -> list[str]:
    """Each `@asset` function under `root/assets` whose body, its docstring included, is over
    ASSET_BODY_LINES lines, as `path: name N lines`."""
    long = []
    for path in sources(root, "assets"):
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.FunctionDef) and any(map(_is_asset, node.decorator_list)):
                lines = node.end_lineno - node.body[0].lineno + 1
                if lines > ASSET_BODY_LINES:
                    long.append(f"{path.relative_to(root)}: {node.name} {lines} lines")
    return long


def test_no_asset_body_is_over_40_lines():
    assert long_asset_bodies(REPO) == []


def test_a_long_asset_body_is_found_however_its_decorator_is_written(tmp_path):
    (tmp_path / "assets").mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(ASSET_BODY_LINES + 1))
    (tmp_path / "assets" / "a.py").write_text(
        f"import dagster as dg\n\n@dg.asset(group_name='g')\ndef long():\n{body}\n\n"
        f"@asset\ndef bare():\n{body}\n\ndef plain():\n{body}\n\n@asset\ndef short():\n    return 1\n"
    )
    assert long_asset_bodies(tmp_path) == ["assets/a.py: long 41 lines", "assets/a.py: bare 41 lines"]
