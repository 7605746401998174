"""Fixtures for the benchmarks: hpc_libs runs no command and changes no file owner.

Slurm's own check of a rendered file (`hpc_libs.slurm.check`) is answered "accepted": it is
Slurm's time, not the charms', and the benchmarks measure the charms' code.
"""

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from hpc_libs.errors import SlurmOpsError
from hpc_libs.machine import files, host
from hpc_libs.slurm import check


@pytest.fixture(autouse=True)
def no_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake hpc_libs' machine seams: any command fails loudly, chown does nothing."""

    def run(argv: Sequence[str], **_: object) -> subprocess.CompletedProcess[str]:
        if tuple(argv) in check.COMMANDS.values():
            return subprocess.CompletedProcess(list(argv), 0, "", "")
        raise SlurmOpsError(f"benchmarks run no commands: {list(argv)}")

    def set_owner(path: Path, owner: str, group: str | None, fd: int | None = None) -> None:
        del path, owner, group, fd

    monkeypatch.setattr(host, "run", run)
    monkeypatch.setattr(files, "set_owner", set_owner)
