"""Run the unit tests: a pytest process per charm's folder, the other folders in one more.

Every charm has modules called `charm` and `config`; each charm's tests import the charm's
modules by those names, with its `src` first on sys.path (tests/unit/charm_testing.py,
`use_charm`). So the tests of two charms cannot share a process: this runs each charm's
folder (tests/unit/<charm>) in its own, and everything else (hpc_libs, the projects, the
autoscaler) in one more, as many at a time as the machine has CPUs, under coverage
(`coverage run --parallel-mode`; `just unit` combines and reports).

Run: `just unit [pytest options] [paths]` (or `uv run python tools/unit_tests.py ...`). Paths
default to tests/unit; a path is sent to the process of the charm folder it is in. Each
process's output is printed when it ends, with its time. Exit status: the first failure's.
"""

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UNIT = Path("tests/unit")
CHARMS = ROOT / "charms"


def charm_of(path: str) -> str | None:
    """Return the charm whose folder of unit tests holds `path` (a file, folder or node id)."""
    parts = Path(path.split("::", maxsplit=1)[0]).parts
    if parts[: len(UNIT.parts)] != UNIT.parts or len(parts) <= len(UNIT.parts):
        return None
    folder = parts[len(UNIT.parts)]
    return folder if (CHARMS / folder / "src").is_dir() else None


def processes(paths: list[str]) -> list[list[str]]:
    """Split test paths into the processes they need: one per charm, one for the rest.

    `tests/unit` itself stands for each of its folders. The largest charm comes first.
    """
    expanded: list[str] = []
    for path in paths:
        if Path(path) == UNIT:
            expanded += sorted(
                str(UNIT / entry.name)
                for entry in (ROOT / UNIT).iterdir()
                if entry.is_dir() and not entry.name.startswith((".", "__"))
            )
        else:
            expanded.append(path)
    groups: dict[str | None, list[str]] = {}
    for path in expanded:
        groups.setdefault(charm_of(path), []).append(path)
    order = sorted(groups, key=lambda charm: (charm != "slurmctld", charm is None, charm or ""))
    return [groups[charm] for charm in order]


def split_arguments(arguments: list[str]) -> tuple[list[str], list[str]]:
    """Separate pytest's options from test paths (the arguments that name a file or folder)."""
    paths = [a for a in arguments if not a.startswith("-") and (ROOT / a.split("::")[0]).exists()]
    options = [a for a in arguments if a not in paths]
    return options, paths or [str(UNIT)]


def run(paths: list[str], options: list[str]) -> tuple[int, str]:
    """Run one pytest process under coverage; return its exit status and output."""
    started = time.monotonic()
    command = [sys.executable, "-m", "coverage", "run", "--parallel-mode", "-m", "pytest"]
    result = subprocess.run(
        [*command, *options, *paths],
        cwd=ROOT,
        check=False,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    took = time.monotonic() - started
    return result.returncode, f"== {' '.join(paths)}: {took:.0f} s\n{result.stdout}"


def main(arguments: list[str]) -> int:
    """Run every process; print each one's output; return the first nonzero exit status."""
    options, paths = split_arguments(arguments)
    groups = processes(paths)
    with ThreadPoolExecutor(min(os.cpu_count() or 1, len(groups))) as pool:
        results = list(pool.map(lambda group: run(group, options), groups))
    for _, output in results:
        print(output, flush=True)
    return next((status for status, _ in results if status != 0), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
