"""A unit's Slurm major upgrade: what its sources offer, the pin, and its turn.

`SlurmCharm` drives it on every reconcile (`hpc_libs.slurm.upgrade` holds the rules):

1. `check`: when `slurm-package-source` or `slurm-major` changed, name the source to apt,
   pin Slurm to the major the unit runs, refresh the cache and record the majors offered
   (unit-local stored state: the next change of the options checks again).
2. `plan`: from the facts (the recorded offer, the options, the installed version) the
   target major, or why none can be reached (`refusal`).
3. The charm asks its own gate (`SlurmCharm.upgrade_waits_for`); on its turn it takes its
   backup (`SlurmCharm.before_upgrade`) and `apply` moves the pin and upgrades, or, for
   slurmd, `release` moves the pin only and the rebuild rollout's RebootProgram upgrades.

This component sets no status; the charm reports the plan.
"""

import logging
from dataclasses import dataclass
from pathlib import Path

import ops

from hpc_libs.interfaces.controller import ControllerData
from hpc_libs.slurm import backup
from hpc_libs.slurm.base import SlurmManager
from hpc_libs.slurm.upgrade import DebSource, choose_target, major, refusal, wait_reason

logger = logging.getLogger(__name__)

DEFAULT_KEY = "auto\n"
"""The default options (`auto`, no major) count as checked: no pin, no extra apt run."""


@dataclass(frozen=True)
class Plan:
    """The upgrade a unit has before it: from `running` to `target` (None: none), or a refusal."""

    running: str
    target: str | None = None
    refused: str | None = None


class MajorUpgrade(ops.Object):
    """Check the named source once per change of the options; plan and apply the upgrade."""

    _stored = ops.StoredState()

    def __init__(self, charm: ops.CharmBase, manager: SlurmManager) -> None:
        super().__init__(charm, "major-upgrade")
        self._manager = manager
        self._stored.set_default(checked=DEFAULT_KEY, offered=[])

    def check(self, source_text: str, source: str | DebSource, wanted: str, running: str) -> None:
        """Name `source` to apt, hold Slurm at `running`'s major, record what is offered.

        Done once per value of the options (`source_text`, `wanted`); a failure leaves them
        unrecorded, so the next event tries again. `archive` with no major asked for names
        no repository: the machine's archive as it is (as `install` uses it) offers the major
        installed from it, so nothing is asked of apt. A unit whose packages are preinstalled,
        or that has no network, then runs neither `apt-get update` (seconds failing to
        resolve the mirror without network) nor `apt-cache` (seconds rebuilding a cache an
        image shipped without) in its first hook.

        Raises:
            PackageError: The source could not be added or the cache refreshed.
            SlurmOpsError: The sources or preferences file could not be written.

        """
        key = f"{source_text}\n{wanted}"
        if key == self._stored.checked:
            return
        self._manager.name_source(source)
        self._manager.hold(major(running))
        offered: list[str] = []
        if source != "archive" or wanted:
            offered = self._manager.offered_majors()
            logger.info("Slurm majors offered for %s: %s", self._manager.daemon, offered or "none")
        self._stored.offered = offered
        self._stored.checked = key

    def plan(self, running: str, wanted: str) -> Plan:
        """Return the upgrade from the package version `running`, given what the source offered."""
        try:
            now = major(running)
        except ValueError:
            return Plan(running=running)
        offered = [str(m) for m in self._stored.offered]
        if (refused := refusal(now, offered, wanted)) is not None:
            return Plan(running=now, refused=refused)
        return Plan(running=now, target=choose_target(now, offered, wanted))

    def release(self, target: str) -> bool:
        """Let apt take `target` (move the pin), installing nothing; return if the pin moved."""
        return self._manager.hold(target)

    def apply(self, target: str) -> None:
        """Move the pin to `target` and upgrade the daemon's packages now (daemon down briefly).

        Raises:
            PackageError: The packages could not be downloaded or installed.
            ServiceError: The daemon could not be stopped or started again.

        """
        self.release(target)
        logger.info("upgrading %s to Slurm %s", self._manager.daemon, target)
        self._manager.upgrade_packages()


def list_backups(event: ops.ActionEvent, root: Path) -> None:
    """Answer `list-backups` (slurmctld, slurmdbd): the backups kept, oldest first.

    Each was taken before a major upgrade (`hpc_libs.slurm.backup`) and is kept until the
    operator deletes it.
    """
    found = backup.list_backups(root)
    event.set_results(
        {
            "directory": str(root / backup.BACKUP_DIR),
            "backups": "\n".join(str(p) for p in found) or "none",
        }
    )


def controllers_wait_reason(target: str, data: ControllerData | None) -> str | None:
    """Say what a daemon after the controllers (slurmd, sackd, slurmrestd) waits for.

    Every controller slurmctld publishes must run `target` first; without the controllers'
    data the daemon waits for them too.
    """
    controllers = (data.controllers if data is not None else None) or []
    if not controllers:
        return f"slurmctld must run {target} first (no controller known yet)"
    versions = [(c.hostname or c.address or "slurmctld", c.version) for c in controllers]
    return wait_reason(target, "slurmctld", versions)
