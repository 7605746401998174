"""Run shellcheck over every shell program the charms run, shipped or built.

Shipped: `charms/*/src/programs/*.sh`, copied to the machine as they are. Built: the
scripts composed per call with shell-quoted arguments and run as `/bin/sh -c <script>` (the
wake watcher's loop, `hpc_libs.charm.wake.watch_command`; slurmd's re-register script,
`node.reregister_command`). Their unit tests pin and run the exact argv, so they stay
built; each is rendered here with sample arguments and checked as the POSIX sh that runs it.

Run: `just lint` (or `uv run python tools/shellcheck_programs.py`). Exit status 1 on a finding.
"""

import importlib
import subprocess
import sys
import tempfile
from pathlib import Path

from hpc_libs.charm import wake

ROOT = Path(__file__).resolve().parents[1]
SHELLCHECK = ["shellcheck", "--shell=sh"]


def shipped() -> list[Path]:
    """List the shell programs the charms ship as files."""
    return sorted(ROOT.glob("charms/*/src/programs/*.sh"))


def built() -> dict[str, str]:
    """Render the shell programs built in Python with sample arguments, by name."""
    sys.path.insert(0, str(ROOT / "charms/slurmd/src"))
    try:
        node = importlib.import_module("node")
    finally:
        sys.path.pop(0)
    dispatch = wake.dispatch_command("slurmctld/0", "/var/lib/juju/charm", "slurmctld-wake")
    restore = node.OperatorState("drain", "operator's reason; rebooted")
    return {
        "wake-watch": wake.watch_command(["squeue", "--partition=a b"], dispatch)[-1],
        "reregister": node.reregister_command("compute-0")[-1],
        "reregister-restore": node.reregister_command("compute-0", restore)[-1],
    }


def main() -> int:
    """Check every program; return shellcheck's worst exit status."""
    worst = subprocess.run([*SHELLCHECK, *map(str, shipped())], check=False).returncode
    with tempfile.TemporaryDirectory() as tmp:
        for name, script in built().items():
            path = Path(tmp) / f"{name}.sh"
            path.write_text(f"#!/bin/sh\n{script}\n")
            result = subprocess.run([*SHELLCHECK, str(path)], check=False)
            worst = max(worst, result.returncode)
    return worst


if __name__ == "__main__":
    sys.exit(main())
