"""Scenarios for the sackd, slurmdbd and slurmrestd charms: install, start and their status.

Each scenario runs once per charm, collected in that charm's folder (its
`test_small_charm_scenarios.py`, in the charm's own process); `charm` says what differs.
"""

import ops
from charm_testing import SLURM_VERSION, FakeMachine
from ops import testing
from small_charms_cases import Charm


def relations(*endpoints: str) -> set[testing.Relation]:
    return {testing.Relation(endpoint) for endpoint in endpoints}


def assert_installed_and_blocked_on_the_first_integration(
    state: testing.State, machine: FakeMachine, charm: Charm
) -> None:
    """The packages were installed once, Slurm's version is shown, the first integration lacks."""
    assert machine.apt_installs == [charm.packages]
    assert state.workload_version == SLURM_VERSION
    first = charm.integrations[0]
    assert state.unit_status == ops.BlockedStatus(f"needs a {first} integration")


def test_install_from_the_ppa_on_a_fresh_machine(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, charm: Charm
):
    state = ctx.run(ctx.on.install(), testing.State())

    assert machine.ran("add-apt-repository") == [
        ["add-apt-repository", "--yes", "--no-update", "ppa:ubuntu-hpc/slurm-wlm-24.11"]
    ]
    assert_installed_and_blocked_on_the_first_integration(state, machine, charm)


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


def test_a_failed_install_blocks_and_the_next_event_retries_it(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, charm: Charm
):
    """Not a hook error: a hook in error would hold every later event, `juju config` too."""
    machine.apt_fails = True

    state = ctx.run(ctx.on.install(), testing.State())

    assert state.unit_status == ops.BlockedStatus(
        f"cannot install {charm.packages}: E: unable to fetch"
    )
    assert state.workload_version == ""
    machine.apt_fails = False

    state = ctx.run(ctx.on.update_status(), state)

    assert_installed_and_blocked_on_the_first_integration(state, machine, charm)


def test_a_ppa_that_cannot_be_added_blocks_until_the_source_is_changed(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, charm: Charm
):
    machine.fail("add-apt-repository", stderr="ERROR: ppa not found for this distribution")

    state = ctx.run(ctx.on.install(), testing.State())

    assert state.unit_status == ops.BlockedStatus(
        "cannot add ppa:ubuntu-hpc/slurm-wlm-24.11: ERROR: ppa not found for this distribution"
    )
    assert machine.apt_installs == []

    state = ctx.run(
        ctx.on.config_changed(),
        testing.State(
            config={"slurm-package-source": "archive"}, stored_states=state.stored_states
        ),
    )

    assert machine.apt_installs == [charm.packages]
    assert state.workload_version == SLURM_VERSION
    assert not isinstance(state.unit_status, ops.MaintenanceStatus)


def test_an_install_that_times_out_waits_and_is_retried(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, charm: Charm
):
    machine.time_out("add-apt-repository")

    state = ctx.run(ctx.on.install(), testing.State())

    # A timeout is a waiting status, which ops ranks below maintenance: still installing.
    assert state.unit_status == ops.MaintenanceStatus(f"installing {charm.name}")
    machine.heal()

    state = ctx.run(ctx.on.start(), state)

    assert machine.apt_installs == [charm.packages]


def test_a_slurm_older_than_24_11_blocks_saying_which_source_to_use(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, charm: Charm
):
    machine.version = "23.11.4-1.2ubuntu5"

    state = ctx.run(
        ctx.on.install(),
        testing.State(
            config={"slurm-package-source": "archive"},
            relations=relations(*charm.integrations),
        ),
    )

    assert isinstance(state.unit_status, ops.BlockedStatus)
    assert state.unit_status.message.startswith("Slurm 23.11.4 is older than 24.11")
    assert "slurm-package-source=ppa" in state.unit_status.message
    assert machine.service_calls == []


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
    """An integration created before the install hook (no reconcile) reports installing."""
    relation = testing.Relation(charm.integrations[0])

    state = ctx.run(ctx.on.relation_created(relation), testing.State(relations={relation}))

    assert machine.apt_installs == []
    assert state.unit_status == ops.MaintenanceStatus(f"installing {charm.name}")
