"""Fixtures for the benchmarks: hpc_libs runs no command and changes no file owner."""

from pathlib import Path

import pytest
from hpc_libs.errors import SlurmOpsError
from hpc_libs.machine import files, host


@pytest.fixture(autouse=True)
def no_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake hpc_libs' machine seams: any command fails loudly, chown does nothing."""

    def run(argv: list[str], **_: object) -> None:
        raise SlurmOpsError(f"benchmarks run no commands: {argv}")

    def set_owner(path: Path, owner: str, group: str | None, fd: int | None = None) -> None:
        del path, owner, group, fd

    monkeypatch.setattr(host, "run", run)
    monkeypatch.setattr(files, "set_owner", set_owner)
