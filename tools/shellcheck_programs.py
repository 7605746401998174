"""Run shellcheck over every shell program the charms and the lab run.

Every program is a file shipped with its charm: `charms/*/src/programs/*.sh` (copied to the
machine, or read by the charm and run as `/bin/sh -c <text> <name> <arguments>`) and
hpc_libs' package data `libs/hpc_libs/src/hpc_libs/**/programs/*.sh` (the wake watchers).
No charm builds shell text in Python: values reach a program as arguments. Each is checked
as the POSIX sh that runs it. The lab's programs (`lab/src/slurm_lab/programs/*.sh`, package
data of slurm_lab) are checked the same way.

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


def programs() -> list[Path]:
    """List the shell programs the charms, hpc_libs and the lab ship as files."""
    return sorted(path for pattern in PATTERNS for path in ROOT.glob(pattern))


def main() -> int:
    """Check every program; return shellcheck's exit status."""
    found = programs()
    if not found:
        print("no shell program found", file=sys.stderr)
        return 1
    return subprocess.run([*SHELLCHECK, *map(str, found)], check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
