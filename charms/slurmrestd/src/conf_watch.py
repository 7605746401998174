"""Wake the charm when sackd fetches a new slurm.conf, not at the next update-status.

slurmrestd reads the configuration sackd caches only when it starts, and which OpenAPI
plugins it can load depends on it (`openapi/slurmdbd` needs accounting through slurmdbd). A
reconfigure on the controllers (slurmdbd joining, new controllers) reaches sackd at once,
but slurmctld publishes nothing new to this unit, so no hook would run before update-status,
up to 5 minutes later. A systemd path unit (root) watches sackd's copy (`PathChanged=`: a
write closed or the file replaced) and starts a oneshot service that dispatches the charm's
`slurmrestd-conf-changed` event through `juju-exec` (`hpc_libs.charm.wake`), whose reconcile
renders the drop-in again and restarts slurmrestd if its fingerprint changed. While a
dispatch runs, further changes merge into it (systemd does not start a running oneshot twice).
"""

import logging
from collections.abc import Sequence
from pathlib import Path

from hpc_libs.charm import wake
from hpc_libs.errors import SlurmOpsError
from hpc_libs.machine import files, systemd

logger = logging.getLogger(__name__)

UNIT_DIR = "etc/systemd/system"
PATH_UNIT = "slurmrestd-charm-conf.path"
SERVICE_UNIT = "slurmrestd-charm-conf.service"

# What may appear in an `ExecStart=` word as it is: systemd gives `%`, `$`, `\`, quotes and
# `;` meanings of their own, so a word holding one is refused.


def path_unit_text(watched: str) -> str:
    """Return the path unit watching sackd's copy of slurm.conf."""
    return "\n".join(
        [
            "# Written by the slurmrestd charm.",
            "[Unit]",
            "Description=Wake the slurmrestd charm when sackd fetches a new slurm.conf",
            "",
            "[Path]",
            f"PathChanged={watched}",
            f"Unit={SERVICE_UNIT}",
            "",
            "[Install]",
            "WantedBy=multi-user.target",
            "",
        ]
    )


def service_unit_text(dispatch: Sequence[str], unit: str) -> str:
    """Return the oneshot service that dispatches the charm's event, bounded in time.

    Raises:
        ValueError: An argument holds a character systemd would interpret.

    """
    return "\n".join(
        [
            "# Written by the slurmrestd charm.",
            "[Unit]",
            f"Description=Wake {unit}: sackd fetched a new slurm.conf",
            "",
            "[Service]",
            "Type=oneshot",
            f"TimeoutStartSec={wake.DISPATCH_TIMEOUT}",
            f"ExecStart={wake.exec_line(dispatch)}",
            "",
        ]
    )


class ConfWatch:
    """The path unit and its service; paths are under `root` so unit tests use tmp_path."""

    def __init__(self, watched: Path, root: Path = Path("/")) -> None:
        self.watched = "/" + str(watched.relative_to(root))
        self.unit_dir = root / UNIT_DIR
        self.path_unit = systemd.Service(PATH_UNIT)

    def install(self, unit: str, charm_dir: Path | str, event: str) -> bool:
        """Write both units if they changed and keep the path unit running; return if changed.

        Raises:
            ValueError: `unit`, `charm_dir` or `event` cannot be put in the dispatch command.
            SlurmOpsError: A file or `systemctl` failed.

        """
        dispatch = wake.dispatch_command(unit, charm_dir, event)
        texts = ((PATH_UNIT, path_unit_text(self.watched)),)
        texts += ((SERVICE_UNIT, service_unit_text(dispatch, unit)),)
        changed = [
            files.write_if_changed(self.unit_dir / name, text, mode=0o644) for name, text in texts
        ]
        if any(changed):
            systemd.daemon_reload()
        if any(changed) or not self.path_unit.is_active():
            self.path_unit.enable()
            self.path_unit.start()
            logger.info("%s wakes %s when sackd fetches a new slurm.conf", PATH_UNIT, unit)
        return any(changed)

    def exists(self) -> bool:
        """Whether either unit file is on the machine."""
        return any((self.unit_dir / name).exists() for name in (PATH_UNIT, SERVICE_UNIT))

    def remove(self) -> None:
        """Stop watching and delete both units (nothing to do if they are gone).

        Raises:
            SlurmOpsError: `systemctl` failed or a file cannot be deleted.

        """
        if not self.exists():
            return
        paths = [self.unit_dir / name for name in (PATH_UNIT, SERVICE_UNIT)]
        self.path_unit.stop()
        self.path_unit.disable()
        for path in paths:
            try:
                path.unlink(missing_ok=True)
            except OSError as e:
                raise SlurmOpsError(f"cannot delete {path}: {e}") from e
        systemd.daemon_reload()
