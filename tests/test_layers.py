"""The house's floors: `digest/` (pure functions) below `resources/` (the store, the model clients)
below `assets/` below `pipelines/` (jobs, sensors, the CLI). A module imports from its own floor or
below, never above: an import up a floor ties the floors into one circle (issue 36 found three,
one of them closing a cycle across three floors). Every import is read, those inside functions
and under `TYPE_CHECKING` too."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FLOORS = ("digest", "resources", "assets", "pipelines")


# The fields that hold a statement's statements: an import is a statement, so it is found by
# walking these alone, not the expressions that are most of a tree's nodes.
STATEMENT_LISTS = ("body", "orelse", "finalbody", "handlers", "cases")


def imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in the tree, wherever it is, by line."""
    found = []
    pending = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        for name in STATEMENT_LISTS:
            pending.extend(getattr(node, name, ()))
    return sorted(found)


def imports_up_a_floor(root: Path) -> list[str]:
    """Each import of a module under `root` that climbs a floor, as `path:line imports module`."""
    climbing = []
    for floor, package in enumerate(FLOORS):
        for path in sorted((root / package).rglob("*.py")):
            for line, module in imported_modules(ast.parse(path.read_text(encoding="utf-8"), str(path))):
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
        for package in FLOORS
        for path in sorted((REPO / package).rglob("*.py"))
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MODULE_LINES
    ]
    readme = len((REPO / "README.md").read_text(encoding="utf-8").splitlines())
    assert long == [] and readme <= README_LINES, (long, f"README.md: {readme} lines")


ASSET_BODY_LINES = 40  # an asset's body past this holds work for a plain function in assets/work/


def _is_asset(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
    return name in ("asset", "multi_asset", "graph_asset")


def long_asset_bodies(root: Path) -> list[str]:
    """Each `@asset` function under `root/assets` whose body, its docstring included, is over
    ASSET_BODY_LINES lines, as `path: name N lines`."""
    long = []
    for path in sorted((root / "assets").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
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
