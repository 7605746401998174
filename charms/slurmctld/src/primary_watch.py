"""Wake the charm the moment this controller becomes primary or stops being it.

slurmctld runs `SlurmctldPrimaryOnProg` when a backup takes control and
`SlurmctldPrimaryOffProg` when a primary hands control back (and when it starts as a backup);
it runs them as SlurmUser (`slurm`: slurmctld drops root right after writing its pid file and
forks them later, with no arguments and its standard streams closed). Dispatching a charm
event needs root (`juju-exec`), so the bridge is split at a file:

1. The program (root-owned, 0755, no input) only writes the time into
   `/run/slurmctld-charm/primary-changed` (it dates the change for the takeover repair), then
   raises the flag `/run/slurmctld-charm/wake`. That directory is root's, group `slurm`, 0770
   (`systemd-tmpfiles` recreates it at boot).
2. A systemd path unit (root) waits for the flag (`PathExists=`) and starts a oneshot service
   that deletes the flag, then runs the background dispatch of `hpc_libs.charm.wake`:
   `juju-exec -u <unit> "JUJU_DISPATCH_PATH=hooks/slurmctld-wake <charm dir>/dispatch"`.

The wake is level-triggered (`PathWake` with `flag=True`): a flag raised while a dispatch runs
or waits for the unit's hook lock starts one more dispatch after it, and a dispatch that
failed is tried again. A `PathChanged=` watch lost exactly that change: systemd does not
watch while the service it started runs, and a backup's hook (started by its slurmctld's
start as a backup, or by the fence watchdog) can still run when it takes over.

Root never reads what slurm wrote, and the service's command line is fixed by the charm, so
the slurm user can only ask for one more `slurmctld-wake` event, which re-reads facts: what it
makes at the flag's name (a directory too) is taken as a flag (`wake.TAKE_FLAG`), and the
signal file's date counts only from a regular file and never after now
(`takeover.signalled_at`). Every
piece is written only when its content changes.
"""

import logging
from pathlib import Path

from hpc_libs.charm import wake
from hpc_libs.machine import files, host

logger = logging.getLogger(__name__)

PROGRAM = "/usr/local/libexec/slurmctld-charm/primary-changed"
"""`SlurmctldPrimaryOnProg` and `SlurmctldPrimaryOffProg`; the same path on every controller."""
RUNTIME_DIR = "/run/slurmctld-charm"
SIGNAL_FILE = f"{RUNTIME_DIR}/primary-changed"
"""Holds (and its mtime is) the time of the last role change slurmctld signalled."""
WAKE_FLAG = f"{RUNTIME_DIR}/wake"
"""Exists from a signal until the dispatch service takes it (deletes it) to wake the charm."""
TMPFILES_CONF = "/etc/tmpfiles.d/slurmctld-charm.conf"
WAKE_NAME = "slurmctld-charm-primary"
"""Names the path unit `<name>.path` and its service `<name>.service` (`wake.PathWake`)."""
TMPFILES_TIMEOUT = 30.0
"""Seconds for `systemd-tmpfiles --create` (it only makes one directory)."""


def program_text() -> str:
    """Return the program slurmctld runs (as slurm) when this controller's primary role changes.

    `programs/primary-changed.sh`: it takes no argument, so it names `SIGNAL_FILE` itself.
    """
    return (Path(__file__).parent / "programs" / "primary-changed.sh").read_text()


def tmpfiles_text(group: str) -> str:
    """Return the tmpfiles.d entry for the runtime directory: root's, writable by `group`."""
    return (
        "# Written by the slurmctld charm: where slurmctld (as SlurmUser) signals a primary\n"
        f"# role change to the root path unit {WAKE_NAME}.path.\n"
        f"d {RUNTIME_DIR} 0770 root {group} -\n"
    )


class PrimaryWatch:
    """The bridge from slurmctld's primary programs to a charm event (see the module doc).

    Paths are built from `root` so unit tests write under `tmp_path`.
    """

    def __init__(self, root: Path = Path("/"), group: str = "slurm") -> None:
        self.root = root
        self.group = group
        self.wake = wake.PathWake(
            WAKE_NAME,
            WAKE_FLAG,
            charm="slurmctld",
            change="its controller's primary role changed",
            root=root,
            flag=True,
        )

    def _at(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def install(self, unit: str, charm_dir: Path | str, event: str) -> bool:
        """Write the program, runtime directory and units; start watching; return if changed.

        Raises:
            ValueError: `unit`, `charm_dir` or `event` cannot be put in a dispatch command.
            SlurmOpsError: A file, `systemd-tmpfiles` or `systemctl` failed.

        """
        changed = files.write_if_changed(self._at(PROGRAM), program_text(), mode=0o755)
        if files.write_if_changed(self._at(TMPFILES_CONF), tmpfiles_text(self.group), mode=0o644):
            host.run(["systemd-tmpfiles", "--create", TMPFILES_CONF], timeout=TMPFILES_TIMEOUT)
            changed = True
        return self.wake.install(unit, charm_dir, event) or changed
