"""The HA helpers on their own: the mount wait, the move to network state, roles, peers seen."""

import base64
import errno
import os
from pathlib import Path
from types import ModuleType

import ops
import pytest
from charm_testing import FakeMachine
from hpc_libs.errors import ServiceError, SlurmOpsError
from hpc_libs.slurm.scontrol import ControllerPing
from hpc_libs.slurm.slurmctld import SlurmctldManager

CHECKPOINT = "/var/lib/slurm/checkpoint"
KEY = base64.b64encode(b"k" * 1024).decode()


@pytest.fixture
def network_state(network_state_module: ModuleType) -> ModuleType:
    return network_state_module


@pytest.fixture
def controllers(controllers_module: ModuleType) -> ModuleType:
    return controllers_module


@pytest.fixture
def manager(tmp_path: Path) -> SlurmctldManager:
    return SlurmctldManager(root=tmp_path)


def mount_table(tmp_path: Path, *lines: str) -> Path:
    table = tmp_path / "mountinfo"
    table.write_text("22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n" + "".join(lines))
    return table


def nfs_at(path: Path) -> str:
    return f"52 22 0:46 / {path} rw,relatime shared:31 - nfs4 10.0.0.5:/export/slurm rw\n"


def autofs_at(path: Path) -> str:
    return f"51 22 0:45 / {path} rw,relatime shared:30 - autofs systemd-1 rw,direct\n"


# The mount request and the mount wait.


def test_the_mount_request_is_the_checkpoint_and_never_executes_from_the_share(network_state):
    request = network_state.mount_request()

    assert request.mountpoint == CHECKPOINT
    assert (
        request.noexec,
        request.nosuid,
        request.nodev,
    ) == (
        True,
        True,
        True,
    )
    assert not request.read_only
    assert network_state.NETWORK_STATE_SAVE_LOCATION == CHECKPOINT + "/slurmctld"


def test_without_a_filesystem_client_the_unit_is_blocked_saying_what_to_integrate(
    network_state, manager, machine
):
    status = network_state.mount_status(manager, integrated=False)

    assert status == ops.BlockedStatus(
        f"use-network-state needs a filesystem-client integration on 'mount' ({CHECKPOINT})"
    )
    assert machine.commands == []  # Nothing to look at yet.


def test_a_plain_directory_is_not_the_shared_filesystem(
    network_state, manager, machine, monkeypatch
):
    monkeypatch.setattr(network_state, "MOUNTINFO", mount_table(manager.root))

    status = network_state.mount_status(manager, integrated=True)

    checkpoint = manager.checkpoint_dir
    assert status == ops.WaitingStatus(
        f"waiting for the shared filesystem at {CHECKPOINT}: {checkpoint} is not a mount point"
    )
    assert machine.ran("ls") == [["ls", "-A", "--", f"{checkpoint}/"]]


def test_a_filesystem_client_saying_not_mounted_explains_the_wait(
    network_state, manager, machine, monkeypatch
):
    monkeypatch.setattr(network_state, "MOUNTINFO", mount_table(manager.root))

    status = network_state.mount_status(manager, integrated=True, answers=[False])

    assert status == ops.WaitingStatus(
        f"waiting for the filesystem-client to mount {CHECKPOINT} (it reports not mounted)"
    )


def test_a_filesystem_client_saying_mounted_is_not_trusted_alone(
    network_state, manager, machine, monkeypatch
):
    monkeypatch.setattr(network_state, "MOUNTINFO", mount_table(manager.root))

    status = network_state.mount_status(manager, integrated=True, answers=[True])

    assert isinstance(status, ops.WaitingStatus)
    assert status.message.endswith("is not a mount point")


def test_the_machine_decides_even_when_the_filesystem_client_says_not_mounted(
    network_state, manager, machine, monkeypatch
):
    checkpoint = manager.checkpoint_dir
    monkeypatch.setattr(network_state, "MOUNTINFO", mount_table(manager.root, nfs_at(checkpoint)))

    assert network_state.mount_status(manager, integrated=True, answers=[False]) is None


def test_an_autofs_trigger_alone_is_not_mounted(network_state, manager, machine, monkeypatch):
    checkpoint = manager.checkpoint_dir
    monkeypatch.setattr(
        network_state, "MOUNTINFO", mount_table(manager.root, autofs_at(checkpoint))
    )

    status = network_state.mount_status(manager, integrated=True)

    assert isinstance(status, ops.WaitingStatus)
    assert status.message.endswith(f"{checkpoint} is an autofs trigger not mounted")


def test_a_hung_server_is_a_wait_not_a_hang(
    network_state, manager, machine: FakeMachine, monkeypatch
):
    checkpoint = manager.checkpoint_dir
    monkeypatch.setattr(network_state, "MOUNTINFO", mount_table(manager.root, nfs_at(checkpoint)))
    machine.time_out("ls")

    status = network_state.mount_status(manager, integrated=True)

    assert status == ops.WaitingStatus(
        f"waiting for the shared filesystem at {CHECKPOINT}: cannot access {checkpoint}: timed out"
    )
    [(_, timeout)] = [t for t in machine.timeouts if t[0][0] == "ls"]
    assert timeout == 15.0


def test_a_real_filesystem_at_the_checkpoint_is_usable(
    network_state, manager, machine, monkeypatch
):
    checkpoint = manager.checkpoint_dir
    table = mount_table(manager.root, autofs_at(checkpoint), nfs_at(checkpoint))
    monkeypatch.setattr(network_state, "MOUNTINFO", table)

    assert network_state.mount_status(manager, integrated=True) is None


# Moving a controller to network state.


def local_controller(manager: SlurmctldManager, machine: FakeMachine) -> None:
    """A running single controller: its queue in local state, its files in /etc/slurm."""
    manager.key.set(KEY)
    manager.config.path.write_text("statesavelocation=/var/lib/slurm/slurmctld\n")
    manager.state_save_location.mkdir(parents=True)
    (manager.state_save_location / "job_state").write_bytes(b"queued jobs")
    machine.active.add("slurmctld")


def test_a_running_controller_is_stopped_before_its_state_is_copied(
    network_state, manager, machine
):
    local_controller(manager, machine)

    assert network_state.move_to_network_state(manager) is True

    assert machine.calls("stop") == ["slurmctld"]
    assert "slurmctld" not in machine.active  # The caller starts it on the share.
    network = manager.network_state_save_location
    assert (network / "job_state").read_bytes() == b"queued jobs"
    assert (manager.state_save_location / "job_state").exists()  # The local copy is kept.
    assert manager.etc_is_shared()
    assert manager.key.get() == KEY  # Read through the link, from the share.
    backups = list(manager.root.glob("etc/slurm_*"))
    assert len(backups) == 1 and (backups[0] / "slurm.conf").exists()
    assert not (backups[0] / "slurm.key").exists()  # No key copy outlives the move.


def test_moving_twice_moves_nothing(network_state, manager, machine):
    local_controller(manager, machine)
    network_state.move_to_network_state(manager)
    machine.service_calls.clear()

    assert network_state.move_to_network_state(manager) is False

    assert machine.service_calls == []
    assert len(list(manager.root.glob("etc/slurm_*"))) == 1


def test_a_stopped_fresh_controller_gets_an_empty_network_state(network_state, manager, machine):
    assert network_state.move_to_network_state(manager) is True

    assert machine.calls("stop") == []
    assert manager.network_state_save_location.is_dir()
    assert manager.etc_is_shared()


def test_state_already_on_the_share_is_never_overwritten(network_state, manager, machine):
    local_controller(manager, machine)
    manager.network_state_save_location.mkdir(parents=True)
    (manager.network_state_save_location / "job_state").write_bytes(b"the share's queue")

    network_state.move_to_network_state(manager)

    assert (manager.network_state_save_location / "job_state").read_bytes() == b"the share's queue"


def test_a_failed_stop_moves_nothing(network_state, manager, machine):
    local_controller(manager, machine)
    machine.fail("systemctl", "stop", returncode=1, stderr="Failed to stop slurmctld.service")

    with pytest.raises(ServiceError, match="systemctl stop slurmctld failed"):
        network_state.move_to_network_state(manager)

    assert not manager.etc_is_shared()
    assert not manager.network_state_save_location.exists()


# A backup's side: wait for the leader's files, then link to them.


SHARED_CONF = (
    "slurmctldhost=ctl9(10.0.0.9)\nslurmctldhost=ctl1(10.0.0.1)\n"
    f"statesavelocation={CHECKPOINT}/slurmctld\n"
)


def leader_wrote(manager: SlurmctldManager, conf: str = SHARED_CONF) -> None:
    shared = manager.shared_etc_dir
    shared.mkdir(parents=True)
    (shared / "slurm.key").write_bytes(base64.b64decode(KEY))
    (shared / "slurm.conf").write_text(conf)


def test_a_backup_waits_for_the_keys_and_slurm_conf_on_the_share(network_state, manager):
    assert not network_state.shared_config_ready(manager, "ctl1")
    manager.shared_etc_dir.mkdir(parents=True)
    (manager.shared_etc_dir / "slurm.key").write_bytes(b"k")

    assert not network_state.shared_config_ready(manager, "ctl1")


def test_a_backup_waits_while_the_shared_slurm_conf_still_points_at_local_state(
    network_state, manager
):
    leader_wrote(
        manager, SHARED_CONF.replace(f"{CHECKPOINT}/slurmctld", "/var/lib/slurm/slurmctld")
    )

    assert not network_state.shared_config_ready(manager, "ctl1")


def test_a_backup_waits_until_the_leader_lists_it_as_a_controller(network_state, manager):
    leader_wrote(manager)

    assert not network_state.shared_config_ready(manager, "ctl2")
    assert not network_state.shared_config_ready(manager, "ctl")  # A prefix is no match.
    assert network_state.shared_config_ready(manager, "ctl1")


def test_an_unreadable_shared_slurm_conf_is_not_ready(network_state, manager):
    leader_wrote(manager, "this is = not [slurm.conf\n")

    assert not network_state.shared_config_ready(manager, "ctl1")


def test_a_backup_links_to_the_leaders_files_and_keeps_its_own_in_a_backup(network_state, manager):
    leader_wrote(manager)
    manager.etc_dir.mkdir(parents=True)
    (manager.etc_dir / "slurm.conf").write_text("clustername=mine\n")
    assert network_state.shared_config_ready(manager, "ctl1")

    backup = network_state.link_shared_config(manager)

    assert manager.etc_is_shared()
    assert manager.config.path.read_text() == SHARED_CONF
    assert backup is not None and (backup / "slurm.conf").read_text() == "clustername=mine\n"
    assert manager.key.get() == KEY


# The controllers this unit sees, and what each does.


@pytest.mark.parametrize(
    ("planned", "seen", "complete"),
    [(1, 0, True), (3, 2, True), (3, 1, False), (3, 0, False), (2, 2, True)],
)
def test_all_peers_seen(network_state, planned, seen, complete):
    assert network_state.all_peers_seen(planned, seen) is complete


def ping(hostname: str, up: bool, index: int) -> ControllerPing:
    return ControllerPing(
        hostname=hostname,
        pinged="UP" if up else "DOWN",
        responding=up,
        mode="primary" if index == 0 else "backup",
        primary=index == 0,
    )


def pings(*states: bool) -> list[ControllerPing]:
    return [ping(f"ctl{i}", up, i) for i, up in enumerate(states)]


@pytest.mark.parametrize(
    ("hostname", "states", "text"),
    [
        ("ctl0", (True,), "primary - UP"),
        ("ctl0", (True, True, False), "primary - UP (backup1 - UP, backup2 - DOWN)"),
        ("ctl1", (False, True, True), "backup1 - UP (primary - DOWN, backup2 - UP)"),
        ("ctl2", (True, True, False), "backup2 - DOWN (primary - UP, backup1 - UP)"),
        ("other", (True, False), "primary - UP, backup1 - DOWN"),
    ],
)
def test_controller_states_put_this_unit_first(controllers, hostname, states, text):
    assert controllers.controller_states(pings(*states), hostname) == text


def test_a_controller_that_answers_without_being_up_is_down(controllers):
    half = ControllerPing(hostname="ctl0", pinged="UP", responding=False)

    assert controllers.controller_states([half], "ctl0") == "primary - DOWN"


# /etc/slurm on overlayfs (containers): a directory of a lower layer cannot be renamed.


def renaming_fails(monkeypatch: pytest.MonkeyPatch, directory: Path, error: int) -> None:
    """Make renaming `directory` fail with `error` (as the kernel says it); others rename."""
    rename = Path.rename

    def refused(self: Path, target):
        if self == directory:
            raise OSError(error, os.strerror(error), str(self))
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", refused)


def test_etc_slurm_that_cannot_be_renamed_is_replaced_in_place_after_its_backup(
    network_state, manager, machine, monkeypatch
):
    local_controller(manager, machine)
    renaming_fails(monkeypatch, manager.etc_dir, errno.EXDEV)  # overlayfs's answer

    network_state.move_to_network_state(manager)

    assert manager.etc_is_shared()
    assert manager.key.get() == KEY
    [backup] = list(manager.root.glob("etc/slurm_*"))
    assert (backup / "slurm.conf").exists() and not (backup / "slurm.key").exists()
    assert not list(manager.root.glob("etc/.slurm.*"))  # No temporary link or moved dir left.


def test_another_rename_failure_leaves_etc_slurm_and_no_temporary_link(
    network_state, manager, machine, monkeypatch
):
    local_controller(manager, machine)
    etc = manager.etc_dir
    renaming_fails(monkeypatch, etc, errno.EACCES)

    with pytest.raises(SlurmOpsError, match="Permission denied"):
        network_state.move_to_network_state(manager)

    assert etc.is_dir() and not etc.is_symlink()
    assert (etc / "slurm.key").exists()
    assert not list(manager.root.glob("etc/.slurm.*"))
