"""Scenarios for the sackd, slurmdbd and slurmrestd charms: install, start and their status.

Each scenario runs once per charm (see conftest.py); `charm` says what differs.
"""

import ops
import pytest
from charm_testing import SLURM_VERSION, FakeMachine
from ops import testing
from small_charms_cases import Charm


def relations(*endpoints: str) -> set[testing.Relation]:
    return {testing.Relation(endpoint) for endpoint in endpoints}


def test_install_from_the_ppa_on_a_fresh_machine(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, charm: Charm
):
    state = ctx.run(ctx.on.install(), testing.State())

    assert machine.ran("add-apt-repository") == [
        ["add-apt-repository", "--yes", "--no-update", "ppa:ubuntu-hpc/slurm-wlm-24.11"]
    ]
    assert machine.apt_installs == [charm.packages]
    assert state.workload_version == SLURM_VERSION
    first = charm.integrations[0]
    assert state.unit_status == ops.BlockedStatus(f"needs a {first} integration")


def test_install_from_the_archive_with_packages_present_touches_no_apt(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, charm: Charm
):
    machine.installed.update(charm.packages)

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
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, charm: Charm
):
    machine.installed.update(charm.packages)

    state = ctx.run(ctx.on.upgrade_charm(), testing.State(stored_states={charm.installed()}))

    assert machine.apt_installs == []
    assert state.workload_version == SLURM_VERSION


def test_start_without_the_last_integration_blocks_on_it(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, charm: Charm
):
    *present, missing = charm.integrations

    state = ctx.run(
        ctx.on.start(),
        testing.State(relations=relations(*present), stored_states={charm.installed()}),
    )

    assert state.unit_status == ops.BlockedStatus(f"needs a {missing} integration")


def test_start_with_every_integration_waits_without_starting_the_daemon(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, charm: Charm
):
    state = ctx.run(
        ctx.on.start(),
        testing.State(relations=relations(*charm.integrations), stored_states={charm.installed()}),
    )

    assert machine.service_calls == []
    assert state.unit_status == ops.WaitingStatus(charm.waiting)


def test_status_before_install_is_maintenance(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, charm: Charm
):
    state = ctx.run(
        ctx.on.update_status(), testing.State(relations=relations(*charm.integrations))
    )

    assert state.unit_status == ops.MaintenanceStatus(f"installing {charm.name}")
