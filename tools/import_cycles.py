"""Find import circles among a source tree's modules, type-checking imports included.

Each argument is a source root (a directory on `sys.path`: `lab/src`, `libs/hpc_libs/src`,
`charms/slurmctld/src`); without one, every root of the repository. A module's imports are
read from its syntax tree, those under `if TYPE_CHECKING:` and inside functions too: a circle
closed only for the type checker still ties the modules together for a reader. `from a import
b` counts as importing `a.b` when that is a module of the tree, else `a`. Prints each circle
(a strongly connected group of modules) and exits 1 if there is one.

Run: `uv run python tools/import_cycles.py lab/src`.
"""

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_ROOTS = ("lab/src", "libs/hpc_libs/src", "autoscaler/src", "charms/*/src")


def modules(root: Path) -> dict[str, Path]:
    """Map each module under root to its file (a package is named by its `__init__.py`)."""
    found: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if parts:
            found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Return the modules of the tree that module `name` imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                out.add(full if full in known else base)
    return {target for target in out if target in known and target != name}


class _Tarjan:
    """Tarjan's algorithm: the strongly connected groups of a directed graph."""

    def __init__(self, graph: dict[str, set[str]]) -> None:
        self.graph = graph
        self.index: dict[str, int] = {}
        self.low: dict[str, int] = {}
        self.stack: list[str] = []
        self.groups: list[list[str]] = []

    def visit(self, node: str) -> None:
        self.index[node] = self.low[node] = len(self.index)
        self.stack.append(node)
        for target in sorted(self.graph[node]):
            if target not in self.index:
                self.visit(target)
                self.low[node] = min(self.low[node], self.low[target])
            elif target in self.stack:
                self.low[node] = min(self.low[node], self.index[target])
        if self.low[node] == self.index[node]:
            cut = len(self.stack) - self.stack[::-1].index(node) - 1
            self.groups.append(sorted(self.stack[cut:]))
            del self.stack[cut:]


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Return the strongly connected groups of more than one module."""
    sys.setrecursionlimit(10_000)
    search = _Tarjan(graph)
    for node in sorted(graph):
        if node not in search.index:
            search.visit(node)
    return [group for group in search.groups if len(group) > 1]


def main(argv: list[str]) -> int:
    """Print the circles of each root; 1 if any."""
    patterns = argv or list(DEFAULT_ROOTS)
    roots = sorted({path for pattern in patterns for path in ROOT.glob(pattern)})
    status = 0
    for root in roots:
        known = modules(root)
        graph = {name: imports(name, path, known) for name, path in known.items()}
        for group in circles(graph):
            print(f"{root.relative_to(ROOT)}: {' <-> '.join(group)}")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
