"""The integration suite's release matrix is what docs/operations.md says it is.

Collects tests/integration as `just integration` does on the lab (no test runs) and reads the
copies each module gets: a module on both releases is collected once per release, and the
newer release's copies carry `newer_slurm`. Copies are told apart by the conftest's
`RELEASE_IN_ID`, the pattern its xdist scheduler splits them by (a lab each).
"""

import importlib.util
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).parents[3]
ROW = re.compile(r"^\| ((?:`test_\w+`(?:, )?)+) \| ([^|]+) \| ([^|]+) \|", re.MULTILINE)


def collected(*args: str) -> list[str]:
    """The node ids `pytest --collect-only` lists for tests/integration on the lab."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_LAB_")}
    env["SLURM_LAB_BACKEND"] = "lab"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/integration", "--collect-only", "-q", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return [line for line in run.stdout.splitlines() if "::" in line]


def without_release(test: str) -> str:
    """A test's id without the release's part: `t[forky]` is `t`, `t[forky-x]` is `t[x]`."""
    return re.sub(r"\[(trixie|forky)\]$|(?<=\[)(trixie|forky)-|-(trixie|forky)(?=\])", "", test)


def integration_conftest() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "integration_conftest", REPO / "tests" / "integration" / "conftest.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def copies() -> dict[str, dict[str, set[str]]]:
    """Per module, per release, its tests' names (without the release)."""
    release_in_id = integration_conftest().RELEASE_IN_ID
    found: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for nodeid in collected():
        path, test = nodeid.split("::", 1)
        match = release_in_id.search(test)
        release = match.group(1) if match else "single"
        found[Path(path).stem][release].add(without_release(test))
    return found


def documented() -> dict[str, tuple[str, str]]:
    """Per module, its 24.11 and 26.05 cells in the matrix of docs/operations.md."""
    text = (REPO / "docs" / "operations.md").read_text()
    return {
        name: (old.strip(), new.strip())
        for names, old, new in ROW.findall(text)
        for name in re.findall(r"`(test_\w+)`", names)
    }


def test_every_module_is_in_the_documented_matrix(copies: dict[str, dict[str, set[str]]]):
    table = documented()
    lab_modules = {
        m for m in copies if m not in ("test_lab_backend_smoke", "test_bench_lab_smoke")
    }
    assert lab_modules <= set(table), sorted(lab_modules - set(table))


def runs_on(cells: tuple[str, str]) -> set[str]:
    """The releases whose cell says the module has a copy there."""
    old, new = cells
    return {
        release
        for release, cell in (("trixie", old), ("forky", new))
        if cell not in ("no", "as the upgrade's target")
    }


def test_a_module_on_both_releases_has_the_same_tests_in_each_copy(
    copies: dict[str, dict[str, set[str]]],
):
    for name, cells in documented().items():
        if runs_on(cells) == {"trixie", "forky"}:
            assert set(copies[name]) == {"trixie", "forky"}, name
            assert copies[name]["trixie"] == copies[name]["forky"], name
        else:
            assert set(copies[name]) == {"single"}, name


def test_the_newer_slurm_marker_selects_exactly_what_runs_on_26_05(
    copies: dict[str, dict[str, set[str]]],
):
    expected = {
        (name, test)
        for name, cells in documented().items()
        if "forky" in runs_on(cells)
        for test in copies[name]["forky" if len(runs_on(cells)) > 1 else "single"]
    }
    newer = {
        (Path(path).stem, without_release(test))
        for path, test in (n.split("::", 1) for n in collected("-m", "newer_slurm"))
    }
    assert newer == expected
