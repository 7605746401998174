"""The sackd charm's own scenarios (the ones it shares with slurmdbd and slurmrestd are in
test_small_charm_scenarios.py)."""

from pathlib import Path

import ops
import pytest
from charm_testing import charm_context, manager_root, use_charm
from hpc_libs.slurm.sackd import SackdManager
from ops import testing

use_charm("sackd")
from charm import SackdCharm  # noqa: E402 (the charm's src first on sys.path)


@pytest.fixture
def ctx() -> testing.Context[ops.CharmBase]:
    return charm_context("sackd", SackdCharm)


@pytest.fixture
def sackd_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the charm's SackdManager at a temporary root."""
    return manager_root(monkeypatch, SackdManager, tmp_path)
