"""Fixtures faking hpc_libs' two machine seams: `host.run` and `files.set_owner`."""

from pathlib import Path

import pytest
from hpc_libs.machine import files, host
from hpc_libs.slurm import check
from hpc_libs_fakes import FakeRun


@pytest.fixture
def fake_run(monkeypatch: pytest.MonkeyPatch) -> FakeRun:
    fake = FakeRun()
    monkeypatch.setattr(host, "run", fake)
    return fake


@pytest.fixture
def owners(monkeypatch: pytest.MonkeyPatch) -> dict[str, tuple[str, str | None]]:
    """Record `file name -> (owner, group)` instead of chown (users like slurm may not exist).

    Files are written through a temporary name and renamed, so the record is keyed by the
    final name: the temporary prefix `.<name>.` is stripped.
    """
    recorded: dict[str, tuple[str, str | None]] = {}

    def record(path: Path, owner: str, group: str | None, fd: int | None = None) -> None:
        name = path.name
        if name.startswith("."):
            name = name[1:].rsplit(".", 1)[0]
        recorded[name] = (owner, group)

    monkeypatch.setattr(files, "set_owner", record)
    return recorded


@pytest.fixture(autouse=True)
def slurm_judged(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Slurm accepts every rendered file; record `(file name, text)` each time it is asked.

    The real `check.check_with_slurm` runs `scontrol`/`slurmdbd`, absent here: its own tests
    (test_slurm_check.py) put it back and fake the command instead.
    """
    judged: list[tuple[str, str]] = []

    def accept(text: str, file: str = "slurm.conf", *, directory: Path, owner: str) -> None:
        del directory, owner
        judged.append((file, text))

    monkeypatch.setattr(check, "check_with_slurm", accept)
    return judged
