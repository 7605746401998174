"""Scenarios for the slurmrestd charm: install, start and the status it reports."""

import ops
import pytest
from ops import testing
from slurmrestd_fakes import SLURM_VERSION, FakeMachine

PACKAGES = ["slurmrestd"]


def installed() -> testing.StoredState:
    return testing.StoredState(
        owner_path="SlurmrestdCharm", name="_stored", content={"installed": True}
    )


def test_install_from_the_ppa_on_a_fresh_machine(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine
):
    state = ctx.run(ctx.on.install(), testing.State())

    assert machine.ran("add-apt-repository") == [
        ["add-apt-repository", "--yes", "--no-update", "ppa:ubuntu-hpc/slurm-wlm-24.11"]
    ]
    assert machine.apt_installs == [PACKAGES]
    assert state.workload_version == SLURM_VERSION
    assert state.unit_status == ops.BlockedStatus("needs a slurmctld integration")


def test_install_from_the_archive_with_packages_present_touches_no_apt(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine
):
    machine.installed.update(PACKAGES)

    state = ctx.run(ctx.on.install(), testing.State(config={"slurm-package-source": "archive"}))

    assert machine.ran("add-apt-repository") == []
    assert machine.apt_installs == []
    assert state.workload_version == SLURM_VERSION


def test_install_with_an_invalid_package_source_blocks_naming_the_option(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine
):
    state = ctx.run(ctx.on.install(), testing.State(config={"slurm-package-source": "snap"}))

    assert machine.apt_installs == []
    assert isinstance(state.unit_status, ops.BlockedStatus)
    assert "'slurm-package-source'" in state.unit_status.message


def test_a_failed_install_errors_the_hook_so_juju_retries(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine
):
    machine.apt_fails = True

    with pytest.raises(testing.errors.UncaughtCharmError, match="cannot install"):
        ctx.run(ctx.on.install(), testing.State())


def test_upgrade_charm_installs_again_idempotently(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine
):
    machine.installed.update(PACKAGES)

    state = ctx.run(ctx.on.upgrade_charm(), testing.State(stored_states={installed()}))

    assert machine.apt_installs == []
    assert state.workload_version == SLURM_VERSION


def test_start_with_slurmctld_waits_for_it_without_starting_slurmrestd(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine
):
    state = ctx.run(
        ctx.on.start(),
        testing.State(relations={testing.Relation("slurmctld")}, stored_states={installed()}),
    )

    assert machine.service_calls == []
    assert state.unit_status == ops.WaitingStatus("waiting for slurmctld")


def test_status_before_install_is_maintenance(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine
):
    state = ctx.run(
        ctx.on.update_status(), testing.State(relations={testing.Relation("slurmctld")})
    )

    assert state.unit_status == ops.MaintenanceStatus("installing slurmrestd")
