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


def second_unit(ctx) -> testing.Context:
    """The same charm's Context as unit slurmctld/1 (a backup controller)."""
    spec = ctx.charm_spec
    return testing.Context(
        spec.charm_type, meta=spec.meta, config=spec.config, actions=spec.actions, unit_id=1
    )


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
    ctx_unit1 = second_unit(ctx)
    state = running(
        slurmdbd_relation({**DBD, "version": "26.05.5"}),
        peer,
        leader=False,
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
    unit1 = second_unit(ctx)
    state = testing.State(
        leader=False,
        relations=[slurmdbd_relation({**DBD, "version": "26.05.5"}), peer],
        config={"slurm-package-source": FORKY},
    )

    unit1.run(unit1.on.install(), state)

    [pinned] = pins
    assert f"Pin: version {installed_major}.*" in pinned
    assert machine.apt_installs == [PACKAGES]


# SlurmctldTimeout during the controllers' turn: raised before the first one stops.

RECONFIGURE = ["scontrol", "reconfigure"]
RAISED = "SlurmctldTimeout 300 s during the upgrade"


def ha_peer(app: dict[str, str], backup_version: str, backup_timeout: str) -> testing.PeerRelation:
    """The peer relation of slurmctld/0 (the primary) with its backup slurmctld/1."""
    return testing.PeerRelation(
        PEER,
        local_app_data=app,
        peers_data={
            1: {
                "hostname": "ctl-1",
                "address": "10.0.0.2",
                "version": backup_version,
                "slurmctld_timeout": backup_timeout,
            }
        },
    )


def next_event(out: testing.State, dbd: str, backup_version: str, backup_timeout: str):
    """The leader's next event: its output's memory, the backup's databag as given."""
    peer = next(r for r in out.relations if isinstance(r, testing.PeerRelation))
    return testing.State(
        leader=True,
        relations=[
            slurmdbd_relation({**DBD, "version": dbd}),
            ha_peer(dict(peer.local_app_data), backup_version, backup_timeout),
        ],
        secrets=list(out.secrets),
        stored_states=out.stored_states,
        config={"slurm-package-source": FORKY},
    )


def conf_timeout(root: Path) -> str:
    conf = (root / "etc/slurm/slurm.conf").read_text()
    return next(line for line in conf.splitlines() if line.startswith("slurmctldtimeout="))


def remembered_timeout(state: testing.State) -> object:
    peer = next(r for r in state.relations if isinstance(r, testing.PeerRelation))
    text = peer.local_app_data.get("upgrade_slurmctld_timeout")
    return None if text is None else json.loads(text)


def test_slurmctld_timeout_is_raised_before_the_primary_stops_and_restored_after(
    ctx, machine: FakeMachine, tmp_path, monkeypatch
):
    """The leader (the primary) raises SlurmctldTimeout with a reconfigure once slurmdbd runs
    the target, upgrades only once its backup runs with it, keeps it while the backup is on
    the old major, and renders the configured value once both run the target."""
    machine.responses[("apt-cache", "madison")] = MADISON
    state_dir(tmp_path)
    machine.active.add("slurmctld")
    at_install: list[tuple[str, int]] = []

    def install(packages, *, upgrade=False, refresh=True):
        at_install.append((conf_timeout(tmp_path), len(machine.ran(*RECONFIGURE))))
        return machine.apt_install(packages, upgrade=upgrade, refresh=refresh)

    monkeypatch.setattr(apt, "install", install)
    app = databag(controllers=[{"unit": "slurmctld/0"}, {"unit": "slurmctld/1"}])
    first = running(ha_peer(app, "24.11.5", "12"), config={"slurm-package-source": FORKY})
    settled = ctx.run(ctx.on.config_changed(), next_event(first, "24.11.5", "24.11.5", "12"))
    assert conf_timeout(tmp_path) == "slurmctldtimeout=4"  # slurmdbd's turn: not raised.
    assert remembered_timeout(settled) is None
    reconfigures = len(machine.ran(*RECONFIGURE))

    raised = ctx.run(ctx.on.update_status(), next_event(settled, "26.05.5", "24.11.5", "12"))

    assert conf_timeout(tmp_path) == "slurmctldtimeout=300"
    assert len(machine.ran(*RECONFIGURE)) == reconfigures + 1
    assert remembered_timeout(raised) == 300
    assert machine.apt_installs == []  # The backup still judges the primary by 12 s.
    assert raised.unit_status == ops.WaitingStatus(
        f"slurmctld/1 must run SlurmctldTimeout 300 s first; {RAISED}"
    )

    machine.version = "26.05.5-1"
    upgraded = ctx.run(ctx.on.update_status(), next_event(raised, "26.05.5", "24.11.5", "300"))

    assert machine.apt_installs == [PACKAGES]
    assert at_install == [("slurmctldtimeout=300", reconfigures + 1)]
    assert conf_timeout(tmp_path) == "slurmctldtimeout=300"  # The backup still runs 24.11.
    assert remembered_timeout(upgraded) == 300

    done = ctx.run(ctx.on.update_status(), next_event(upgraded, "26.05.5", "26.05.5", "300"))

    assert conf_timeout(tmp_path) == "slurmctldtimeout=4"
    assert remembered_timeout(done) is None
    assert RAISED not in done.unit_status.message


def test_a_new_leader_midway_keeps_slurmctld_timeout_raised(ctx, machine: FakeMachine, tmp_path):
    """The old leader raised it; slurmctld/1 leads now, before the primary upgraded: the
    timeout stays raised in its slurm.conf and in the memory, and it waits for the primary."""
    machine.responses[("apt-cache", "madison")] = MADISON
    state_dir(tmp_path)
    machine.active.add("slurmctld")
    unit1 = second_unit(ctx)
    peer = testing.PeerRelation(
        PEER,
        local_app_data=databag(
            controllers=[{"unit": "slurmctld/0"}, {"unit": "slurmctld/1"}],
            upgrade_slurmctld_timeout=300,
        ),
        peers_data={
            0: {
                "hostname": "ctl-0",
                "address": "10.0.0.1",
                "version": "24.11.5",
                "slurmctld_timeout": "300",
            }
        },
    )
    state = running(
        slurmdbd_relation({**DBD, "version": "26.05.5"}),
        peer,
        config={"slurm-package-source": FORKY},
    )

    out = unit1.run(unit1.on.leader_elected(), state)

    assert conf_timeout(tmp_path) == "slurmctldtimeout=300"
    assert remembered_timeout(out) == 300
    assert machine.apt_installs == []
    assert out.unit_status == ops.WaitingStatus(
        f"slurmctld must run 26.05 first (slurmctld/0 runs 24.11); {RAISED}"
    )


def test_a_jump_slurm_forbids_is_refused_before_anything_moves_naming_the_path(
    ctx, machine: FakeMachine, tmp_path
):
    """24.11 -> 26.11 skips three majors: Slurm allows at most two (26.11 from 25.05 on)."""
    machine.responses[("apt-cache", "madison")] = MADISON.replace("26.05.5", "26.11.0")
    state_dir(tmp_path)

    out = ctx.run(ctx.on.config_changed(), running(config={"slurm-package-source": FORKY}))

    assert out.unit_status == ops.BlockedStatus(
        "Slurm 26.11 cannot upgrade 24.11 directly (at most 3 majors at once): upgrade "
        "24.11 -> 26.05 -> 26.11, setting slurm-major=26.05 first (from a source that "
        "offers 26.05)"
    )
    assert machine.ran("tar") == []
    assert machine.ran("apt-get", "install") == []
    assert machine.apt_installs == []
    pin = (tmp_path / "etc/apt/preferences.d/slurm-charms").read_text()
    assert "Pin: version 24.11.*" in pin
