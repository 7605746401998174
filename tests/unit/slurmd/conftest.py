"""Load the slurmd charm's modules; fake its machine, with its files under tmp_path."""

from functools import partial
from pathlib import Path
from types import ModuleType

import ops
import pytest
from charm_testing import FakeMachine, charm_context, load_charm
from hpc_libs.errors import SlurmOpsError
from hpc_libs.slurm.slurmd import SlurmdManager
from ops import testing

_MODULES = load_charm("slurmd", ("config", "node", "charm"))
HARDWARE = (
    "NodeName=host0 CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 "
    "RealMemory=1000\nUpTime=0-01:00:00\n"
)


@pytest.fixture
def machine(machine: FakeMachine, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeMachine:
    """The shared fake machine (tests/unit/conftest.py) with HARDWARE and no GPU.

    Waits for the node to register (`node.wait_for_registration`) take no time.
    """
    machine.responses[("slurmd", "-C")] = HARDWARE
    machine.responses[("nvidia-smi",)] = SlurmOpsError("nvidia-smi not found")
    monkeypatch.setattr(_MODULES["charm"], "SlurmdManager", partial(SlurmdManager, root=tmp_path))
    monkeypatch.setattr(_MODULES["node"].time, "sleep", lambda _: None)
    return machine


@pytest.fixture
def ctx() -> testing.Context[ops.CharmBase]:
    return charm_context("slurmd", _MODULES["charm"].SlurmdCharm)


@pytest.fixture
def node_module() -> ModuleType:
    return _MODULES["node"]
