"""Load the slurmctld charm's modules; fake its machine, with its files under tmp_path."""

# ruff: noqa: E402 (the charm's src goes first on sys.path before its modules are imported)

from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import ModuleType

import ops
import pytest
from charm_testing import FakeMachine, charm_context, use_charm
from hpc_libs.slurm.slurmctld import SlurmctldManager
from ops import testing

use_charm("slurmctld")
import applied
import charm
import controllers
import credentials
import exporter_service
import facts
import fence
import network_state
import partitions
import primary_watch
import rebuild
import render
import takeover

_REAL_EXPORTER_INSTALL = exporter_service.ExporterService.install


@pytest.fixture
def render_module() -> ModuleType:
    return render


@pytest.fixture
def partitions_module() -> ModuleType:
    return partitions


@pytest.fixture
def network_state_module() -> ModuleType:
    return network_state


@pytest.fixture
def controllers_module() -> ModuleType:
    return controllers


@pytest.fixture
def primary_watch_module() -> ModuleType:
    return primary_watch


@pytest.fixture
def fence_module() -> ModuleType:
    return fence


@pytest.fixture
def exporter_service_module() -> ModuleType:
    return exporter_service


@pytest.fixture
def applied_module() -> ModuleType:
    return applied


@pytest.fixture
def credentials_module() -> ModuleType:
    return credentials


@pytest.fixture
def rebuild_module() -> ModuleType:
    return rebuild


@pytest.fixture
def takeover_module() -> ModuleType:
    return takeover


@pytest.fixture
def ctx() -> testing.Context[ops.CharmBase]:
    return charm_context("slurmctld", charm.SlurmctldCharm)


@pytest.fixture
def machine(machine: FakeMachine, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeMachine:
    """The shared fake machine (tests/unit/conftest.py), named ctl0."""
    monkeypatch.setattr(charm, "SlurmctldManager", partial(SlurmctldManager, root=tmp_path))
    monkeypatch.setattr(facts.socket, "gethostname", lambda: "ctl0")
    # The exporter's service is its own concern (test_exporter_service.py, `exporter` fixture):
    # the other scenarios count slurmctld's service calls without it.
    # It runs already there, so they see no call for it.
    monkeypatch.setattr(exporter_service.ExporterService, "install", _no_exporter)
    machine.active.add(exporter_service.SERVICE_UNIT)
    return machine


def _no_exporter(*_: object) -> bool:
    return False


@pytest.fixture
def exporter(machine: FakeMachine, monkeypatch: pytest.MonkeyPatch) -> FakeMachine:
    """The fake machine, with the charm installing the exporter's service as it does."""
    module = exporter_service
    monkeypatch.setattr(module.ExporterService, "install", _REAL_EXPORTER_INSTALL)
    machine.active.discard(module.SERVICE_UNIT)
    return machine


@pytest.fixture
def settled(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine
) -> Callable[[testing.State], testing.State]:
    """Run one reconcile so slurmctld runs with its files, then forget what ran."""

    def settle(state: testing.State) -> testing.State:
        out = ctx.run(ctx.on.update_status(), state)
        machine.commands.clear()
        machine.service_calls.clear()
        return out

    return settle


@pytest.fixture
def shared_fs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A real filesystem at the checkpoint, as the machine's mount table lists it.

    Without this fixture the checkpoint is a plain directory (or nothing): not mounted.
    """
    checkpoint = tmp_path / "var/lib/slurm/checkpoint"
    checkpoint.mkdir(parents=True)
    table = tmp_path / "mountinfo"
    table.write_text(
        "22 1 8:1 / / rw shared:1 - ext4 /dev/sda1 rw\n"
        f"52 22 0:46 / {checkpoint} rw shared:31 - nfs4 10.0.0.5:/export/slurm rw\n"
    )
    monkeypatch.setattr(network_state, "MOUNTINFO", table)
    return checkpoint
