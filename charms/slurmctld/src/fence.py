"""Fence a controller that cannot write the shared state: no shared state, no slurmctld.

Slurm guards a backup's takeover with the heartbeat the controller in charge writes into
`StateSaveLocation` every `SlurmctldTimeout/4` s: a backup that cannot ping the primary takes
over only once that heartbeat is stale too. Slurm has no fencing of the other side, though. A
primary cut from the network (and so from the shared filesystem) keeps running from memory,
and once the link is back it "reasserts" itself every `SlurmctldTimeout` s (controller.c:
`REQUEST_CONTROL` to the backups): the backup hands over, and every job it accepted
meanwhile is gone, overwritten by the primary's stale queue. That is split brain, seen on
the lab.

So a watchdog service (root) runs beside slurmctld on every controller of network state.
Every second it probes, in the background, that the checkpoint is still a mount and that
SlurmUser can write a file into `StateSaveLocation`. When no probe has succeeded for `grace`
seconds (half of `SlurmctldTimeout`, so before any backup can take over) it kills
slurmctld with SIGKILL, as it could not save its state anyway, and records the fence in
`FENCE_FLAG`. The charm then starts no slurmctld and says why. As soon as a probe succeeds
again the watchdog starts slurmctld itself. As the primary it takes control back through
Slurm's own hand-over: the backup saves its state and the primary reads it. As a backup it
stands by. Either change wakes the charm: the watchdog starts the primary watch's dispatch
service (`systemctl start --no-block`, `primary_watch.WAKE_NAME`). It never writes the primary
watch's signal file: that directory is the slurm group's, and a shell redirection there would
follow any link slurm planted (root never writes where slurm can).

While it runs, a child of the watchdog keeps its working directory on the share, so the
share cannot be unmounted under a controller that may serve (a leaving filesystem-client
unmounts at the same time as its principal's departure: `departure`). A probe that hangs (a
hard NFS mount) is never waited for: the next probe starts only once it
returned, and meanwhile the last success ages. Probing and killing use this machine's own
process ids, never a unit's cgroup.
"""

import logging
from pathlib import Path

from hpc_libs.machine import files, systemd
from primary_watch import WAKE_NAME

logger = logging.getLogger(__name__)

PROGRAMS_DIR = Path(__file__).parent / "programs"
"""The shell programs the charm ships (`just lint` runs shellcheck over them)."""

PROGRAM = "/usr/local/libexec/slurmctld-charm/fence"
SERVICE_UNIT = "slurmctld-charm-fence.service"
RUNTIME_DIR = "/run/slurmctld-fence"
"""The watchdog's runtime directory (root's, kept across the watchdog's restarts)."""
FENCE_FLAG = f"{RUNTIME_DIR}/fenced"
"""Exists while this controller is fenced; holds the time and the reason."""
MIN_GRACE = 2
WAKE_SERVICE = f"{WAKE_NAME}.service"
"""The oneshot that dispatches the charm's wake event (the primary watch's `PathWake`)."""


def grace_seconds(slurmctld_timeout: int) -> int:
    """Seconds without a successful probe before slurmctld is fenced: half `SlurmctldTimeout`.

    A backup takes over no sooner than `SlurmctldTimeout` s after the primary's last
    heartbeat, so a primary that lost the shared state is down before a backup serves.
    """
    return max(MIN_GRACE, slurmctld_timeout // 2)


def program_text() -> str:
    """Return the watchdog (POSIX sh, `programs/fence.sh`).

    Its arguments: `<checkpoint> <state dir> <grace s> <user>`. It names `RUNTIME_DIR` and
    `WAKE_SERVICE` itself; the unit tests run it and check both.
    """
    return (PROGRAMS_DIR / "fence.sh").read_text()


def service_unit_text(checkpoint: str, state_dir: str, grace: int, user: str) -> str:
    """Return the watchdog's service: always running, restarted if it ever stops."""
    return systemd.service_text(
        "slurmctld",
        ["Description=Stop slurmctld while this machine cannot write the shared Slurm state"],
        [
            f"ExecStart={PROGRAM} {checkpoint} {state_dir} {grace} {user}",
            "Restart=always",
            "RestartSec=1",
            "TimeoutStopSec=5",  # Nothing to save: a stop never holds a departure up.
            f"RuntimeDirectory={Path(RUNTIME_DIR).name}",
            "RuntimeDirectoryPreserve=yes",
        ],
    )


class Fence(systemd.CharmService):
    """The watchdog of this controller (see the module doc); paths from `root` for tests."""

    unit = SERVICE_UNIT

    def install(self, checkpoint: str, state_dir: str, grace: int, user: str) -> bool:
        """Write the watchdog and its service and keep it running; return if anything changed.

        Raises:
            SlurmOpsError: A file or `systemctl` failed.

        """
        changed = files.write_if_changed(self.at(PROGRAM), program_text(), mode=0o755)
        changed = self.write_unit(service_unit_text(checkpoint, state_dir, grace, user)) or changed
        self.service.keep_running(changed)
        if changed:
            logger.info("%s fences slurmctld after %d s without shared state", SERVICE_UNIT, grace)
        return changed

    def reason(self) -> str | None:
        """Why this controller is fenced (`<time> cannot write ...`), or None if it is not."""
        text = files.read_bytes(self.at(FENCE_FLAG))
        if text is None:
            return None
        return text.decode(errors="replace").strip() or "fenced"
