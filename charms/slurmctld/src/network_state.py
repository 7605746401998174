"""Network state: the controllers' state and /etc/slurm on one shared filesystem.

Slurm's high availability is active-passive: every controller unit runs slurmctld, the first
`SlurmctldHost` serves and the others stand by, and a backup takes over when the primary has
not answered its pings for `SlurmctldTimeout` seconds. A backup can only take over the queue
if it reads the same `StateSaveLocation` as the primary, so HA needs *network state*
(`use-network-state`): a filesystem-client subordinate mounts one shared filesystem at
`/var/lib/slurm/checkpoint` on every controller; the state lives in `<checkpoint>/slurmctld`
and `/etc/slurm` becomes a symlink to `<checkpoint>/etc-slurm`, so every controller reads the
one slurm.conf and the one set of keys the leader writes.

This module holds the steps on this machine: the mount's status, the leader's move of its
state to the share, a backup's link to the leader's files, and the waits for the peers.
`placement` decides when each runs.
"""

import logging
from collections.abc import Sequence
from pathlib import Path

import ops
from controllers import controller_hosts, shared_slurm_conf
from hpc_libs.interfaces.mount_info import MountInfo
from hpc_libs.machine import mounts
from hpc_libs.slurm.slurmctld import CHECKPOINT_DIR, NETWORK_STATE_NAME, SlurmctldManager

logger = logging.getLogger(__name__)

CHECKPOINT = f"/{CHECKPOINT_DIR}"
"""Where the filesystem-client mounts the shared filesystem, as slurm.conf names paths."""
NETWORK_STATE_SAVE_LOCATION = f"{CHECKPOINT}/{NETWORK_STATE_NAME}"
"""`StateSaveLocation` with network state (`SlurmctldManager.network_state_save_location`)."""
MOUNTINFO = mounts.MOUNTINFO
"""The mount table `check_mount` reads (unit tests point it at a file of their own)."""


WAITING_FOR_LEADER = (
    "waiting for the leader's slurm.conf (listing this unit) and keys on the shared filesystem"
)
"""Status of a backup until the leader has written the shared configuration for it."""


def mount_request() -> MountInfo:
    """Return what the leader asks the filesystem-client for: nothing there ever executes.

    Made when asked, not at import: every hook imports this module, and the first model built
    in a process costs pydantic's set-up.
    """
    return MountInfo(mountpoint=CHECKPOINT, noexec=True, nosuid=True, nodev=True)


def mount_status(
    manager: SlurmctldManager, *, integrated: bool, answers: Sequence[bool] = ()
) -> ops.StatusBase | None:
    """Return why the checkpoint is not usable yet (None once a real filesystem is there).

    The mount is checked on this machine (accessed, then looked up in the mount table), not
    taken from the filesystem-client's word (`answers`, its `mounted` values): autofs
    mounts lazily and a `mounted: "true"` can be stale. A `"false"` only explains the wait.
    """
    if not integrated:
        return ops.BlockedStatus(
            f"use-network-state needs a filesystem-client integration on 'mount' ({CHECKPOINT})"
        )
    check = mounts.check_mount(manager.checkpoint_dir, mountinfo=MOUNTINFO)
    if check.mounted:
        return None
    if False in answers:
        return ops.WaitingStatus(
            f"waiting for the filesystem-client to mount {CHECKPOINT} (it reports not mounted)"
        )
    return ops.WaitingStatus(f"waiting for the shared filesystem at {CHECKPOINT}: {check.problem}")


def move_to_network_state(manager: SlurmctldManager) -> bool:
    """Move a controller's state and /etc/slurm to the shared filesystem (leader only).

    For a running controller this is the migration that keeps its queue: slurmctld is
    stopped (its state files must not change during the copy), the local state is copied to
    the network location unless the share holds state already, /etc/slurm is backed up and
    replaced by the symlink (seeding the share with its files), and the caller then starts
    slurmctld with `StateSaveLocation` on the share. Returns whether anything was moved;
    once /etc/slurm links to the share, nothing happens. Idempotent step by step, so a
    failure is retried by the next event without losing the local state.

    Raises:
        SlurmOpsError: slurmctld could not be stopped or a copy failed.

    """
    if manager.etc_is_shared():
        return False
    if manager.service.is_active():
        logger.info("stopping slurmctld to move its state to %s", manager.checkpoint_dir)
        manager.service.stop()
    if manager.copy_state_to_network():
        logger.info("copied the local state to %s", manager.network_state_save_location)
    manager.create_state_save_location(manager.network_state_save_location)
    backup = manager.share_etc()
    if backup is not None:
        logger.info("the former %s is kept in %s", manager.etc_dir, backup)
    return True


def shared_config_ready(manager: SlurmctldManager, hostname: str) -> bool:
    """Whether the leader's configuration on the share is ready for this backup to start.

    The keys are there, and a slurm.conf that points `StateSaveLocation` at the share (one
    seeded from a local /etc/slurm does not, until the leader rewrites it) and lists this
    host as a controller (slurmctld refuses to start on a host `SlurmctldHost` does not
    name; the leader adds a unit once it has seen its address).
    """
    if not manager.shared_files_ready():
        return False
    conf = shared_slurm_conf(manager)
    if conf is None:
        return False
    return (
        conf.state_save_location == NETWORK_STATE_SAVE_LOCATION
        and hostname in controller_hosts(conf)
    )


def unadopted_shared_etc(manager: SlurmctldManager) -> str | None:
    """Why the share's `etc-slurm`, not linked yet, is refused (the leader's fails its hook).

    Nothing in a refused tree is read (`SlurmctldManager.shared_etc_problem`).
    """
    return None if manager.etc_is_shared() else manager.shared_etc_problem()


def link_shared_config(manager: SlurmctldManager) -> Path | None:
    """Make /etc/slurm the symlink to the leader's files on the share (a backup's side).

    Call only once `shared_config_ready`: the share already holds /etc/slurm's content, so
    this unit's own files are only backed up, never copied onto the share.
    """
    return manager.share_etc()


def all_peers_seen(planned_units: int, peers_with_address: int) -> bool:
    """Whether this unit sees every planned controller (itself plus each peer's address).

    A new leader must not rewrite the controllers before it has seen each of them: a
    controller it has not seen yet would be dropped from slurm.conf and from every node's
    `--conf-server`.
    """
    return peers_with_address + 1 >= planned_units


def waiting_for_peers(seen: int, planned: int) -> str:
    """Status of a leader that has not seen every planned controller yet."""
    return f"waiting to see every controller before changing them ({seen} of {planned} seen)"
