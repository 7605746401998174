"""Installing a Slurm daemon from a charm whose reconcile path runs on every event."""

import ops
import pytest
from charm_testing import SLURM_VERSION, FakeMachine, already_installed
from hpc_libs.charm.install import SlurmInstaller
from hpc_libs.slurm.sackd import SackdManager
from ops import testing


class ReconcilingCharm(ops.CharmBase):
    """Installs from its one reconcile path, as slurmctld and slurmd do."""

    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        self.installer = SlurmInstaller(self, SackdManager())
        framework.observe(self.on.update_status, self._reconcile)

    def _reconcile(self, _: ops.EventBase) -> None:
        if not self.installer.installed:  # as SlurmCharm does before every reconcile
            self.installer.install("archive")


@pytest.fixture
def ctx() -> testing.Context[ReconcilingCharm]:
    return testing.Context(ReconcilingCharm, meta={"name": "reconciling"})


def test_the_first_event_installs_and_records_the_version(
    ctx: testing.Context[ReconcilingCharm], machine: FakeMachine
):
    state = ctx.run(ctx.on.update_status(), testing.State())

    assert machine.apt_installs == [["sackd", "slurm-client"]]
    assert state.workload_version == SLURM_VERSION
    assert already_installed("ReconcilingCharm") in state.stored_states


def test_once_installed_later_events_query_no_packages(
    ctx: testing.Context[ReconcilingCharm], machine: FakeMachine
):
    state = testing.State(stored_states={already_installed("ReconcilingCharm")})

    ctx.run(ctx.on.update_status(), state)

    assert machine.commands == []
    assert machine.apt_installs == []
