"""The slurmrestd charm's scenarios (install and package-source cases it shares with sackd and
slurmdbd are in test_small_charm_scenarios.py)."""

from pathlib import Path

import ops
import pytest
from charm_testing import charm_context, manager_root, use_charm
from hpc_libs.slurm.slurmrestd import SlurmrestdManager
from ops import testing

use_charm("slurmrestd")
from charm import SlurmrestdCharm  # noqa: E402 (the charm's src first on sys.path)


@pytest.fixture
def ctx() -> testing.Context[ops.CharmBase]:
    return charm_context("slurmrestd", SlurmrestdCharm)


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the charm's SlurmrestdManager (and its sackd) at a temporary root."""
    return manager_root(monkeypatch, SlurmrestdManager, tmp_path)
