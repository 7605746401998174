"""Wake the charm the moment this controller becomes primary or stops being it.

slurmctld runs `SlurmctldPrimaryOnProg` when a backup takes control and
`SlurmctldPrimaryOffProg` when a primary hands control back; it runs them as SlurmUser
(`slurm`: slurmctld drops root right after writing its pid file and forks them later, with
no arguments and its standard streams closed). Dispatching a charm event needs root
(`juju-exec`), so the bridge is split at a file:

1. The program (root-owned, 0755, no input) only writes the time into
   `/run/slurmctld-charm/primary-changed`. That directory is root's, group `slurm`, 0770
   (`systemd-tmpfiles` recreates it at boot).
2. A systemd path unit (root) watches that file (`PathChanged=`: a write closed) and starts a
   oneshot service that runs the background dispatch of `hpc_libs.charm.wake`:
   `juju-exec -u <unit> "JUJU_DISPATCH_PATH=hooks/slurmctld-wake <charm dir>/dispatch"`.

Root never reads what slurm wrote, and the service's command line is fixed by the charm, so
the slurm user can only ask for one more `slurmctld-wake` event, which re-reads facts. While
a dispatch runs, further changes merge into it (systemd does not start a running oneshot
twice). Every piece is written only when its content changes.
"""

import logging
from collections.abc import Sequence
from pathlib import Path

from hpc_libs.charm import wake
from hpc_libs.machine import files, host, systemd

logger = logging.getLogger(__name__)

PROGRAM = "/usr/local/libexec/slurmctld-charm/primary-changed"
"""`SlurmctldPrimaryOnProg` and `SlurmctldPrimaryOffProg`; the same path on every controller."""
RUNTIME_DIR = "/run/slurmctld-charm"
SIGNAL_FILE = f"{RUNTIME_DIR}/primary-changed"
TMPFILES_CONF = "/etc/tmpfiles.d/slurmctld-charm.conf"
UNIT_DIR = "/etc/systemd/system"
PATH_UNIT = "slurmctld-charm-primary.path"
SERVICE_UNIT = "slurmctld-charm-primary.service"
TMPFILES_TIMEOUT = 30.0
"""Seconds for `systemd-tmpfiles --create` (it only makes one directory)."""

# What may appear in a unit file's ExecStart word without quoting or escaping: systemd gives
# `%`, `$`, `\`, quotes and `;` meanings of their own, so any of them is refused outright.


def program_text(signal_file: str = SIGNAL_FILE) -> str:
    """Return the program slurmctld runs (as slurm) when this controller's primary role changes."""
    return "\n".join(
        [
            "#!/bin/sh",
            "# Written by the slurmctld charm (SlurmctldPrimaryOnProg, SlurmctldPrimaryOffProg).",
            "# slurmctld runs this as SlurmUser; a root systemd path unit watching the file",
            f"# below wakes the charm ({PATH_UNIT}).",
            f"exec /usr/bin/date -u +%s > {signal_file}",
            "",
        ]
    )


def tmpfiles_text(group: str) -> str:
    """Return the tmpfiles.d entry for the runtime directory: root's, writable by `group`."""
    return (
        "# Written by the slurmctld charm: where slurmctld (as SlurmUser) signals a primary\n"
        "# role change to the root path unit slurmctld-charm-primary.path.\n"
        f"d {RUNTIME_DIR} 0770 root {group} -\n"
    )


def path_unit_text() -> str:
    """Return the root path unit watching the signal file."""
    return "\n".join(
        [
            "# Written by the slurmctld charm.",
            "[Unit]",
            "Description=Watch for this Slurm controller becoming or ceasing to be primary",
            "",
            "[Path]",
            f"PathChanged={SIGNAL_FILE}",
            f"Unit={SERVICE_UNIT}",
            "",
            "[Install]",
            "WantedBy=multi-user.target",
            "",
        ]
    )


def service_unit_text(dispatch: Sequence[str], unit: str) -> str:
    """Return the oneshot service running the charm's dispatch, bounded in time.

    Raises:
        ValueError: An argument holds a character systemd would interpret.

    """
    return "\n".join(
        [
            "# Written by the slurmctld charm.",
            "[Unit]",
            f"Description=Wake {unit}: its controller's primary role changed",
            "",
            "[Service]",
            "Type=oneshot",
            f"TimeoutStartSec={wake.DISPATCH_TIMEOUT}",
            f"ExecStart={wake.exec_line(dispatch)}",
            "",
        ]
    )


class PrimaryWatch:
    """The bridge from slurmctld's primary programs to a charm event (see the module doc).

    Paths are built from `root` so unit tests write under `tmp_path`.
    """

    def __init__(self, root: Path = Path("/"), group: str = "slurm") -> None:
        self.root = root
        self.group = group
        self.path_unit = systemd.Service(PATH_UNIT)

    def _at(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def install(self, unit: str, charm_dir: Path | str, event: str) -> bool:
        """Write the program, runtime directory and units; start watching; return if changed.

        Raises:
            ValueError: `unit`, `charm_dir` or `event` cannot be put in a dispatch command.
            SlurmOpsError: A file, `systemd-tmpfiles` or `systemctl` failed.

        """
        dispatch = wake.dispatch_command(unit, charm_dir, event)
        service = service_unit_text(dispatch, unit)
        changed = files.write_if_changed(self._at(PROGRAM), program_text(), mode=0o755)
        if files.write_if_changed(self._at(TMPFILES_CONF), tmpfiles_text(self.group), mode=0o644):
            host.run(["systemd-tmpfiles", "--create", TMPFILES_CONF], timeout=TMPFILES_TIMEOUT)
            changed = True
        units = [
            files.write_if_changed(self._at(f"{UNIT_DIR}/{name}"), text, mode=0o644)
            for name, text in ((PATH_UNIT, path_unit_text()), (SERVICE_UNIT, service))
        ]
        if any(units):
            systemd.daemon_reload()
            changed = True
        if changed or not self.path_unit.is_active():
            self.path_unit.enable()
            self.path_unit.start()
            logger.info("%s wakes %s when this controller's primary role changes", PATH_UNIT, unit)
        return changed
