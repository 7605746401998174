"""Run shellcheck over every shell program the charms and the lab run.

Every program is a file shipped with its charm: `charms/*/src/programs/*.sh` (copied to the
machine, or read by the charm and run as `/bin/sh -c <text> <name> <arguments>`) and
hpc_libs' package data `libs/hpc_libs/src/hpc_libs/**/programs/*.sh` (the wake watchers).
No charm builds shell text in Python: values reach a program as arguments. Each is checked
as the POSIX sh that runs it, and so are the lab's (`lab/src/slurm_lab/programs/*.sh`); the
lab's hook-tool client (`lab/src/slurm_lab/juju/jujuc.sh`) is checked as the shell its `#!`
line names.

Run: `just lint` (or `uv run python tools/shellcheck_programs.py`). Exit status 1 on a finding.
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHELLCHECK = ["shellcheck", "--shell=sh"]
PATTERNS = (
    "charms/*/src/programs/*.sh",
    "libs/hpc_libs/src/hpc_libs/**/programs/*.sh",
    "lab/src/slurm_lab/programs/*.sh",
)
LAB_PATTERNS = ("lab/src/slurm_lab/juju/*.sh",)
"""Checked as the shell of their `#!` line (shellcheck reads it)."""


def programs(patterns: tuple[str, ...] = PATTERNS) -> list[Path]:
    """List the shell programs matching patterns, from the repository's root."""
    return sorted(path for pattern in patterns for path in ROOT.glob(pattern))


def main() -> int:
    """Check every program; return shellcheck's exit status (the worst of both runs)."""
    found, lab = programs(), programs(LAB_PATTERNS)
    if not found or not lab:
        print("no shell program found", file=sys.stderr)
        return 1
    product = subprocess.run([*SHELLCHECK, *map(str, found)], check=False).returncode
    own_shell = subprocess.run(["shellcheck", *map(str, lab)], check=False).returncode
    return max(product, own_shell)


if __name__ == "__main__":
    sys.exit(main())
