"""Apply known-bad mutations one at a time and check that the unit tests kill each.

Each mutation replaces exact text in one file (the tool fails loudly if the text is not
there: the code moved, so the mutation must be updated), runs pytest, and restores the file
in a `finally`, checking the restore by hash. Exit status 1 if a mutant survives.

Run: `just mutants` (or `uv run python tools/mutants.py [name ...]`).
"""

import hashlib
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTEST = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider"]


@dataclass(frozen=True)
class Mutation:
    """Replace `original` by `mutant` in `path`; `tests` (pytest paths) must then fail."""

    name: str
    path: str
    original: str
    mutant: str
    tests: str = "tests/unit"


MUTATIONS = [
    Mutation(
        "key-briefly-0644",
        "libs/hpc_libs/src/hpc_libs/machine/files.py",
        "            os.fchmod(f.fileno(), mode)\n            f.write(data)\n",
        "            os.fchmod(f.fileno(), 0o644)\n            f.write(data)\n"
        "            os.fchmod(f.fileno(), mode)\n",
        "tests/unit/hpc_libs/test_guards.py tests/unit/hpc_libs/test_machine.py",
    ),
    Mutation(
        "port-refusal-removed",
        "charms/slurmd/src/config.py",
        '"nodename", "port", "state", "reason"',
        '"nodename", "state", "reason"',
        "tests/unit/hpc_libs/test_guards.py",
    ),
    Mutation(
        "scontrol-without-timeout",
        "libs/hpc_libs/src/hpc_libs/slurm/scontrol.py",
        'return host.run(["scontrol", *args], timeout=self.timeout).stdout',
        'return host.run(["scontrol", *args]).stdout',
        "tests/unit/hpc_libs/test_scontrol.py",
    ),
    Mutation(
        "fenced-controller-started",
        "charms/slurmctld/src/charm.py",
        "return self.fence.reason() is None",
        "return True",
        "tests/unit/slurmctld/test_ha_fence.py::test_a_fenced_backup_says_why_and_starts_no_slurmctld",
    ),
    Mutation(
        "fence-never-kills",
        "charms/slurmctld/src/fence.py",
        "'            kill -KILL \"$pid\"',",
        "'            : \"$pid\"',",
        "tests/unit/slurmctld/test_ha_fence.py::"
        "test_the_watchdog_kills_slurmctld_without_the_state_and_starts_it_once_back",
    ),
    Mutation(
        "port-failure-aborts-reconcile",
        "libs/hpc_libs/src/hpc_libs/charm/base.py",
        "            self.failure = self.failure or e\n\n    def converge",
        "            raise\n\n    def converge",
        "tests/unit/sackd/test_sackd_ports.py tests/unit/slurmd/test_slurmd_ports.py",
    ),
    Mutation(
        "srun-range-overlap-accepted",
        "libs/hpc_libs/src/hpc_libs/charm/ports.py",
        "        if clash := next((kept for kept in target if kept.overlaps(ports)), None):",
        "        if clash := None:",
        "tests/unit/hpc_libs/test_charm_ports.py tests/unit/sackd/test_sackd_ports.py",
    ),
    Mutation(
        "exporter-drain-as-a-state",
        "libs/hpc_libs/src/hpc_libs/slurm/metrics.py",
        "        nodes.add(line.partition, line.state)\n",
        "        nodes.add(line.partition, line.flags[0] if line.flags else line.state)\n",
        "tests/unit/hpc_libs/test_exporter.py",
    ),
    Mutation(
        "exporter-every-controller-exports-the-cluster",
        "libs/hpc_libs/src/hpc_libs/slurm/exporter.py",
        "cluster_wide = metrics.in_control(pings) == self.hostname",
        "cluster_wide = bool(pings)",
        "tests/unit/hpc_libs/test_exporter.py",
    ),
]


def digest(data: bytes) -> str:
    """Return the SHA-256 of `data`."""
    return hashlib.sha256(data).hexdigest()


def pytest(tests: str) -> subprocess.CompletedProcess[str]:
    """Run pytest on `tests` (space-separated paths)."""
    return subprocess.run(
        [*PYTEST, *tests.split()],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )


def run(mutation: Mutation) -> bool:
    """Apply `mutation`, run its tests, restore; return whether the tests killed it.

    The tests must pass unmutated first: a red baseline would "kill" every mutant.
    """
    baseline = pytest(mutation.tests)
    if baseline.returncode != 0:
        raise SystemExit(f"{mutation.name}: {mutation.tests} fail without the mutation")
    path = ROOT / mutation.path
    original = path.read_bytes()
    text = original.decode()
    if text.count(mutation.original) != 1:
        raise SystemExit(f"{mutation.name}: the original text is not in {mutation.path} once")
    started = time.monotonic()
    try:
        path.write_text(text.replace(mutation.original, mutation.mutant))
        result = pytest(mutation.tests)
    finally:
        path.write_bytes(original)
        if digest(path.read_bytes()) != digest(original):
            raise SystemExit(f"{mutation.path} was not restored")
    failed = [line for line in result.stdout.splitlines() if line.startswith("FAILED")]
    killed = result.returncode != 0
    verdict = "killed" if killed else "SURVIVED"
    by = failed[0].removeprefix("FAILED ").split(" - ")[0] if failed else "-"
    print(f"{mutation.name}: {verdict} by {by} ({time.monotonic() - started:.1f} s)", flush=True)
    return killed


def main(names: list[str]) -> int:
    """Run the named mutations (default: all); return 1 if any survives."""
    chosen = [m for m in MUTATIONS if not names or m.name in names]
    results = [run(m) for m in chosen]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
