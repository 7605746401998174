"""slurmctld in a major upgrade: after every slurmdbd, the primary first, StateSaveLocation saved.

The controllers run 24.11; the operator names a source with 26.05. Each scenario fires one
event and checks what the unit waits for, the archive of StateSaveLocation taken before the
packages move, and that nothing moves out of turn.
"""

import json
import stat
from pathlib import Path

import ops
import pytest
from charm_testing import FakeMachine
from hpc_libs.machine import apt
from ops import testing
from test_charm_slurmctld import PEER, databag, running
from test_slurmctld_accounting_and_jwt import DBD, slurmdbd_relation

FORKY = "deb http://deb.debian.org/debian forky main"
MADISON = """\
 slurmctld | 26.05.5-1 | http://deb.debian.org/debian forky/main amd64 Packages
 slurmctld | 24.11.5-1 | http://deb.debian.org/debian trixie/main amd64 Packages
"""
PACKAGES = ["slurmctld", "slurm-client", "slurm-wlm-jwt-plugin"]


def with_dbd(version: str) -> testing.State:
    relation = slurmdbd_relation({**DBD, "version": version})
    return running(relation, config={"slurm-package-source": FORKY})


def state_dir(root: Path) -> Path:
    path = root / "var/lib/slurm/slurmctld"
    path.mkdir(parents=True, exist_ok=True)
    (path / "job_state").write_bytes(b"state")
    return path


def backups(root: Path) -> list[Path]:
    return sorted((root / "var/backups/slurm-charms").glob("*"))


def test_out_of_turn_the_controller_waits_for_slurmdbd(ctx, machine: FakeMachine, tmp_path):
    machine.responses[("apt-cache", "madison")] = MADISON
    state_dir(tmp_path)

    out = ctx.run(ctx.on.config_changed(), with_dbd("24.11.5"))

    assert out.unit_status == ops.WaitingStatus(
        "slurmdbd must run 26.05 first (10.0.0.5 runs 24.11)"
    )
    assert machine.ran("tar") == []
    assert machine.apt_installs == []
    pin = (tmp_path / "etc/apt/preferences.d/slurm-charms").read_text()
    assert "Pin: version 24.11.*" in pin


def test_in_turn_state_save_location_is_archived_before_the_packages_move(
    ctx, machine: FakeMachine, tmp_path
):
    machine.responses[("apt-cache", "madison")] = MADISON
    state = state_dir(tmp_path)

    ctx.run(ctx.on.config_changed(), with_dbd("26.05.5"))

    [tar] = machine.ran("tar")
    [archive] = backups(tmp_path)
    assert tar == [
        "tar",
        "--create",
        "--gzip",
        "--file",
        str(archive),
        "--directory",
        str(state.parent),
        "--",
        "slurmctld",
    ]
    assert archive.name.startswith("slurmctld-state-24.11-to-26.05-")
    assert stat.S_IMODE(archive.stat().st_mode) == 0o600
    download = machine.ran("apt-get", "install", "--yes", "--download-only")
    assert machine.commands.index(tar) < machine.commands.index(download[0])
    assert machine.apt_installs == [PACKAGES]


def test_a_state_save_location_replaced_by_a_link_is_not_followed_nor_upgraded(
    ctx, machine: FakeMachine, tmp_path
):
    machine.responses[("apt-cache", "madison")] = MADISON
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / "var/lib/slurm/slurmctld"
    link.parent.mkdir(parents=True)
    link.symlink_to(elsewhere)

    out = ctx.run(ctx.on.config_changed(), with_dbd("26.05.5"))

    assert machine.ran("tar") == []
    assert machine.apt_installs == []
    assert backups(tmp_path) == []
    assert isinstance(out.unit_status, ops.BlockedStatus)
    assert "a link is refused" in out.unit_status.message


def test_a_backup_controller_waits_for_the_primary(ctx, machine: FakeMachine, tmp_path):
    machine.responses[("apt-cache", "madison")] = MADISON
    peer = testing.PeerRelation(
        PEER,
        local_app_data=databag(controllers=[{"unit": "slurmctld/0"}, {"unit": "slurmctld/1"}]),
        peers_data={0: {"hostname": "ctl-0", "address": "10.0.0.1", "version": "24.11.5"}},
    )
    ctx_unit1 = testing.Context(
        type(ctx.charm_spec.charm_type) if False else ctx.charm_spec.charm_type,
        meta=ctx.charm_spec.meta,
        config=ctx.charm_spec.config,
        actions=ctx.charm_spec.actions,
        unit_id=1,
    )
    state = running(slurmdbd_relation({**DBD, "version": "26.05.5"}), peer)
    state = testing.State(
        leader=False,
        relations=state.relations,
        secrets=state.secrets,
        stored_states=state.stored_states,
        config={"slurm-package-source": FORKY},
    )

    with ctx_unit1(ctx_unit1.on.config_changed(), state) as manager:
        manager.run()
        reason = manager.charm.upgrade_waits_for("26.05")

    assert reason == "slurmctld must run 26.05 first (slurmctld/0 runs 24.11)"
    assert machine.apt_installs == []
    assert machine.ran("tar") == []


def test_list_backups_gives_the_archive_path(ctx, machine: FakeMachine, tmp_path):
    machine.responses[("apt-cache", "madison")] = MADISON
    state_dir(tmp_path)
    ctx.run(ctx.on.config_changed(), with_dbd("26.05.5"))

    ctx.run(ctx.on.action("list-backups"), with_dbd("26.05.5"))

    assert ctx.action_results == {
        "directory": str(tmp_path / "var/backups/slurm-charms"),
        "backups": str(backups(tmp_path)[0]),
    }
    assert json.dumps(ctx.action_results)  # Plain strings only.


def test_a_failed_install_after_the_backup_is_a_status_and_the_retry_completes(
    ctx, machine: FakeMachine, tmp_path
):
    """The source fails mid-upgrade: blocked with apt's reason (no hook error), slurmctld
    back on the old release, the backup kept; after the fix the next event upgrades, and
    keeps the one backup taken before anything moved."""
    machine.responses[("apt-cache", "madison")] = MADISON
    state_dir(tmp_path)
    machine.active.add("slurmctld")
    machine.apt_fails = True

    failed = ctx.run(ctx.on.config_changed(), with_dbd("26.05.5"))

    assert isinstance(failed.unit_status, ops.BlockedStatus)
    assert failed.unit_status.message.startswith("cannot install")
    assert "E: unable to fetch" in failed.unit_status.message
    assert machine.calls("stop") == ["slurmctld"]
    assert "slurmctld" in machine.active  # started again, on the release dpkg left
    [backup] = backups(tmp_path)

    machine.apt_fails = False
    machine.version = "26.05.5-1"
    retried = ctx.run(ctx.on.update_status(), later_state(failed))

    assert machine.apt_installs == [PACKAGES]
    assert retried.workload_version == "26.05.5-1"
    assert backups(tmp_path) == [backup]
    assert len(machine.ran("tar")) == 1
    assert not isinstance(retried.unit_status, ops.BlockedStatus), retried.unit_status


def test_a_new_release_that_does_not_start_is_a_status_and_the_retry_completes(
    ctx, machine: FakeMachine, tmp_path
):
    """The packages moved but slurmctld 26.05 does not start: blocked with its own reason;
    once the operator fixed it, the next event starts it, with no second backup."""
    machine.responses[("apt-cache", "madison")] = MADISON
    state_dir(tmp_path)
    machine.active.add("slurmctld")
    machine.service_fails("slurmctld", "fatal: cannot convert the state", verbs=("start",))

    failed = ctx.run(ctx.on.config_changed(), with_dbd("26.05.5"))

    assert isinstance(failed.unit_status, ops.BlockedStatus)
    assert "fatal: cannot convert the state" in failed.unit_status.message
    [backup] = backups(tmp_path)

    machine.heal()
    machine.version = "26.05.5-1"
    retried = ctx.run(ctx.on.update_status(), later_state(failed))

    assert "slurmctld" in machine.active
    assert retried.workload_version == "26.05.5-1"
    assert backups(tmp_path) == [backup]
    assert not isinstance(retried.unit_status, ops.BlockedStatus), retried.unit_status


def later_state(state: testing.State) -> testing.State:
    """The next event's state: the output's, with the slurmdbd and the config kept."""
    return testing.State(
        leader=state.leader,
        relations=state.relations,
        secrets=state.secrets,
        stored_states=state.stored_states,
        config=dict(state.config),
    )


@pytest.mark.parametrize("case", [("24.11.5", "24.11"), ("26.05.5", "26.05")])
def test_a_controller_added_during_the_upgrade_installs_what_the_primary_allows(
    ctx, machine: FakeMachine, tmp_path, monkeypatch, case
):
    """`juju add-unit slurmctld` with the option naming forky: the new controller installs
    the major the one before it runs (or, once it runs the target, the target), pinned
    before apt runs; never a controller newer than the primary."""
    primary_runs, installed_major = case
    machine.responses[("apt-cache", "madison")] = MADISON
    pins: list[str] = []
    pin_file = tmp_path / "etc/apt/preferences.d/slurm-charms"

    def install(packages, *, upgrade=False, refresh=True):
        pins.append(pin_file.read_text() if pin_file.exists() else "")
        return machine.apt_install(packages, upgrade=upgrade, refresh=refresh)

    monkeypatch.setattr(apt, "install", install)
    peer = testing.PeerRelation(
        PEER,
        local_app_data=databag(controllers=[{"unit": "slurmctld/0"}]),
        peers_data={0: {"hostname": "ctl-0", "address": "10.0.0.1", "version": primary_runs}},
    )
    unit1 = testing.Context(
        ctx.charm_spec.charm_type,
        meta=ctx.charm_spec.meta,
        config=ctx.charm_spec.config,
        actions=ctx.charm_spec.actions,
        unit_id=1,
    )
    state = testing.State(
        leader=False,
        relations=[slurmdbd_relation({**DBD, "version": "26.05.5"}), peer],
        config={"slurm-package-source": FORKY},
    )

    unit1.run(unit1.on.install(), state)

    [pinned] = pins
    assert f"Pin: version {installed_major}.*" in pinned
    assert machine.apt_installs == [PACKAGES]
