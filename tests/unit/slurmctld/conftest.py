"""Load the slurmctld charm's modules; fake its machine, with its files under tmp_path."""

from functools import partial
from pathlib import Path
from types import ModuleType

import ops
import pytest
from charm_testing import FakeMachine, charm_context, load_charm
from hpc_libs.slurm.slurmctld import SlurmctldManager
from ops import testing

_MODULES = load_charm(
    "slurmctld", ("config", "cluster", "applied", "retire", "credentials", "charm")
)


@pytest.fixture
def cluster_module() -> ModuleType:
    return _MODULES["cluster"]


@pytest.fixture
def applied_module() -> ModuleType:
    return _MODULES["applied"]


@pytest.fixture
def credentials_module() -> ModuleType:
    return _MODULES["credentials"]


@pytest.fixture
def ctx() -> testing.Context[ops.CharmBase]:
    return charm_context("slurmctld", _MODULES["charm"].SlurmctldCharm)


@pytest.fixture
def machine(machine: FakeMachine, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeMachine:
    """The shared fake machine (tests/unit/conftest.py), named ctl0."""
    charm = _MODULES["charm"]
    monkeypatch.setattr(charm, "SlurmctldManager", partial(SlurmctldManager, root=tmp_path))
    monkeypatch.setattr(charm.socket, "gethostname", lambda: "ctl0")
    return machine
