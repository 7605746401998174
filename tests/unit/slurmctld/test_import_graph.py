"""The charm's modules import each other without a circle, type-checking imports included.

A circle makes the import order matter and hides which module is the ground floor: before
issue 36, `ha` imported `applied`, `rotation` and `takeover` for types only while `applied`
(through `cluster`) and `takeover` imported `ha`.
"""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "charms/slurmctld/src"


def imports(src: Path) -> dict[str, set[str]]:
    """Return each module of `src` and the modules of `src` it imports, anywhere in its text.

    Every `import` and `from ... import` counts, under `if TYPE_CHECKING:` or in a function
    too: only the modules of `src` are kept.
    """
    local = {path.stem for path in src.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in sorted(src.glob("*.py")):
        named: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                named |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                named.add(node.module.split(".")[0])
        graph[path.stem] = named & local - {path.stem}
    return graph


def circle(graph: dict[str, set[str]]) -> list[str] | None:
    """Return one circle of imports (`a -> b -> a` as [a, b, a]); None without any."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return None
        for imported in sorted(graph.get(module, ())):
            if (found := visit(imported, [*path, module])) is not None:
                return found
        done.add(module)
        return None

    for module in sorted(graph):
        if (found := visit(module, [])) is not None:
            return found
    return None


def test_the_charms_modules_import_no_circle():
    graph = imports(SRC)
    assert "charm" in graph and len(graph) > 10  # The charm's modules, not an empty folder.

    assert circle(graph) is None, " -> ".join(circle(graph) or [])


def test_a_type_checking_import_closes_a_circle(tmp_path: Path):
    (tmp_path / "low.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from high import High\n"
    )
    (tmp_path / "high.py").write_text("import low\n")
    (tmp_path / "alone.py").write_text("import os\nimport ops\n")

    assert circle(imports(tmp_path)) == ["high", "low", "high"]


def test_a_function_level_import_closes_a_circle(tmp_path: Path):
    (tmp_path / "a.py").write_text("def f():\n    from b import g\n")
    (tmp_path / "b.py").write_text("from c import x\n")
    (tmp_path / "c.py").write_text("import a\n")

    assert circle(imports(tmp_path)) == ["a", "b", "c", "a"]
