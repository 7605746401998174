"""tools/mutants.py: every mutant's target matches the tree, and a target that drifted fails.

A mutant names its target by symbol (`path::Class.method`) and a fragment that must occur
once inside it; the tool never skips one that no longer matches.
"""

from pathlib import Path
from types import ModuleType

import pytest
from tool_modules import load_tool

load_tool("unit_tests.py", "unit_tests")  # mutants.py imports it as a sibling script
_MUTANTS = load_tool("mutants.py", "mutants")

MODULE = """\
import os

LIMIT = 3


class Keeper:
    def keep(self, n):
        return min(n, LIMIT)


@staticmethod
def spare(n):
    return min(n, LIMIT)
"""


@pytest.fixture
def mutants() -> ModuleType:
    return _MUTANTS


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text(MODULE)
    (tmp_path / "run.sh").write_text("#!/bin/sh\nexec sleep 1\n")
    return tmp_path


def mutation(mutants: ModuleType, target: str, original: str, name: str = "m") -> object:
    return mutants.Mutation(name, target, original, "return n", "tests/unit/x.py::test_x")


def test_every_mutant_target_in_the_tree_matches(mutants: ModuleType):
    assert mutants.target_problems(mutants.MUTATIONS) == []


def test_every_python_target_names_a_symbol(mutants: ModuleType):
    assert [m.name for m in mutants.MUTATIONS if m.path.endswith(".py") and not m.symbol] == []


def test_the_fragment_is_replaced_inside_its_symbol_only(mutants: ModuleType, tree: Path):
    fragment = "return min(n, LIMIT)"
    text = (tree / "pkg/a.py").read_text()

    kept = mutants.mutated(mutation(mutants, "pkg/a.py::spare", fragment), text)

    spare = "@staticmethod\ndef spare(n):\n    return "
    assert kept == text.replace(f"{spare}min(n, LIMIT)", f"{spare}n")
    assert "return min(n, LIMIT)" in kept  # Keeper.keep's


SYMBOL_GONE = [
    ("pkg/a.py::Keeper.gone", "return min(n, LIMIT)", "Keeper.gone is defined 0 times"),
    ("pkg/b.py::spare", "return min(n, LIMIT)", "pkg/b.py does not exist"),
    ("pkg/a.py", "import os", "names no symbol"),
]
"""Targets whose symbol is not there: (target, original text, what the problem says)."""
FRAGMENT_GONE = [
    ("pkg/a.py::Keeper.keep", "return max(n, LIMIT)", "0 times"),
    ("pkg/a.py::spare", "import os", "in pkg/a.py::spare 0 times"),
    ("pkg/a.py::LIMIT", "LIMIT = 4", "in pkg/a.py::LIMIT 0 times"),
    ("run.sh", "sleep 2", "in run.sh 0 times"),
]
"""Targets whose symbol is there, without the original text."""


@pytest.mark.parametrize(
    ("target", "original", "problem"),
    [*SYMBOL_GONE, *FRAGMENT_GONE],
    ids=["symbol", "file", "no-symbol", "fragment", "outside-the-symbol", "assignment", "program"],
)
def test_a_target_that_no_longer_matches_is_a_problem_naming_the_mutant(
    mutants: ModuleType, tree: Path, target: str, original: str, problem: str
):
    problems = mutants.target_problems([mutation(mutants, target, original, "drifted")], tree)

    assert len(problems) == 1
    assert problems[0].startswith("drifted: ")
    assert problem in problems[0]


def test_a_symbol_moved_to_another_file_needs_only_its_path_changed(
    mutants: ModuleType, tree: Path
):
    (tree / "pkg/b.py").write_text((tree / "pkg/a.py").read_text())
    (tree / "pkg/a.py").write_text("import os\n")
    old = mutation(mutants, "pkg/a.py::Keeper.keep", "return min(n, LIMIT)")
    new = mutation(mutants, "pkg/b.py::Keeper.keep", "return min(n, LIMIT)")

    assert mutants.target_problems([old, new], tree) == [
        "m: pkg/a.py::Keeper.keep: Keeper.keep is defined 0 times"
    ]


def test_a_fragment_twice_in_its_symbol_is_a_problem(mutants: ModuleType, tree: Path):
    (tree / "pkg/a.py").write_text("def f(n):\n    n += 1\n    n += 1\n    return n\n")

    problems = mutants.target_problems([mutation(mutants, "pkg/a.py::f", "n += 1")], tree)

    assert problems == ["m: the original text is in pkg/a.py::f 2 times, not once: 'n += 1'"]


def test_check_lists_every_unmatched_target_at_once_and_fails(
    mutants: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    first, second, third = mutants.MUTATIONS[:3]
    drifted = [
        mutants.Mutation(first.name, first.target, "no such text", first.mutant, first.tests),
        second,
        mutants.Mutation(third.name, third.path + "::Gone", third.original, "", third.tests),
    ]
    monkeypatch.setattr(mutants, "MUTATIONS", drifted)

    status = mutants.main(["--check"])

    errors = capsys.readouterr().err.split("\n")
    assert status == 1
    assert [line.split(":")[0] for line in errors[:2]] == [first.name, third.name]
    assert errors[2] == "2 of 3 targets do not match"
