"""The slurmdbd charm's own scenarios (install and packaging scenarios it shares with sackd and
slurmrestd are in test_small_charm_scenarios.py)."""

from collections.abc import Callable
from pathlib import Path

import ops
import pytest
from charm_testing import charm_context, charm_fixtures, use_charm
from hpc_libs.machine import files
from hpc_libs.slurm.slurmdbd import SlurmdbdManager
from ops import testing

use_charm("slurmdbd")
from charm import SlurmdbdCharm  # noqa: E402 (the charm's src first on sys.path)

ctx, dbd_root = charm_fixtures("slurmdbd", SlurmdbdCharm, SlurmdbdManager, "dbd_root")
"""The charm's Context; its SlurmdbdManager under a temporary root."""


@pytest.fixture
def unit_ctx() -> Callable[[int], testing.Context[ops.CharmBase]]:
    """A Context for unit `slurmdbd/<n>` (the unit number decides the join order)."""

    def make(unit_id: int) -> testing.Context[ops.CharmBase]:
        context = charm_context("slurmdbd", SlurmdbdCharm)
        context.unit_id = unit_id
        return context

    return make


@pytest.fixture
def owners(monkeypatch: pytest.MonkeyPatch, machine: object) -> dict[str, str]:
    """The owner each file was given, by file name (after the fake machine's own patch)."""
    given: dict[str, str] = {}

    def record(path: Path, owner: str, group: str | None, fd: int | None = None) -> None:
        # write_atomic gives its temporary file `.<name>.<random>` to the owner
        name = path.name[1:].rsplit(".", 1)[0] if path.name.startswith(".") else path.name
        given[name] = owner

    monkeypatch.setattr(files, "set_owner", record)
    return given
