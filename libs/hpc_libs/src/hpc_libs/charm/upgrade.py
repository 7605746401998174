"""A unit's Slurm major upgrade: what its sources offer, the pin, and its turn.

`SlurmCharm` drives it on every reconcile (`hpc_libs.slurm.upgrade` holds the rules):

1. `check`: when `slurm-package-source` or `slurm-major` changed, name the source to apt,
   pin Slurm to the major the unit runs, refresh the cache and record the majors offered
   (unit-local stored state: the next change of the options checks again).
2. `plan`: from the facts (the recorded offer, the options, the installed version) the
   target major, or why none can be reached (`refusal`).
3. `step` asks the charm's gate (`UpgradeTurn.upgrade_waits_for`); on its turn it takes the
   charm's backup (`UpgradeTurn.before_upgrade`, once per upgrade: `saved`) and `apply` moves
   the pin and upgrades, or, for slurmd, `release` moves the pin only and the rebuild
   rollout's RebootProgram upgrades.

A unit not installed yet goes through the same gate first (`install_first`): `check` records
the offer and `install_major` picks the newest major whose turn has come, pinned before apt
installs anything.

`SlurmCharm` runs `step` before its reconcile and puts `status` (refused, waiting for its
turn, upgrading, or left to the rollout) among its statuses; this component sets none itself.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Protocol

import ops

from hpc_libs.charm.config import SlurmCharmConfig
from hpc_libs.charm.install import SlurmInstaller
from hpc_libs.interfaces.controller import ControllerData
from hpc_libs.machine import apt
from hpc_libs.slurm import backup
from hpc_libs.slurm.base import SlurmManager
from hpc_libs.slurm.upgrade import (
    BASE_SOURCES,
    DebSource,
    choose_target,
    is_newer,
    major,
    refusal,
    wait_reason,
)

logger = logging.getLogger(__name__)

DEFAULT_KEY = "auto\n"
"""The default options (`auto`, no major) count as checked: no pin, no extra apt run."""


@dataclass(frozen=True)
class Plan:
    """The upgrade a unit has before it: from `running` to `target` (None: none), or a refusal."""

    running: str
    target: str | None = None
    refused: str | None = None


class UpgradeTurn(Protocol):
    """What the charm tells its upgrade (`SlurmCharm` declares each, with its default)."""

    upgrades_in_charm: ClassVar[bool]
    """Whether the charm upgrades Slurm on its turn (slurmd: its rebuild rollout does)."""

    def upgrade_waits_for(self, target: str) -> str | None:
        """Say what must run major `target` before this unit upgrades; None: its turn."""
        ...

    def before_upgrade(self, plan: "Plan") -> None:
        """Take what must be saved before the upgrade; SlurmOpsError keeps the old Slurm."""
        ...

    def upgrade_note(self) -> str | None:
        """Return what the upgrade status adds."""
        ...


class MajorUpgrade(ops.Object):
    """Check the named source once per change of the options; plan and apply the upgrade."""

    _stored = ops.StoredState()

    def __init__(
        self,
        charm: ops.CharmBase,
        manager: SlurmManager,
        installer: SlurmInstaller,
        *,
        turn: UpgradeTurn,
    ) -> None:
        super().__init__(charm, "major-upgrade")
        self._manager = manager
        self._installer = installer
        self._turn = turn
        # `saved`: the upgrade (`<running>-><target>`) whose backup was taken, so a retry
        # after a failed upgrade keeps that backup instead of saving state a failed start of
        # the new daemon may already have converted.
        self._stored.set_default(checked=DEFAULT_KEY, offered=[], saved="")

    def check(self, source_text: str, source: str | DebSource, wanted: str, running: str) -> None:
        """Name `source` to apt, hold Slurm at `running`'s major, record what is offered.

        Done once per value of the options (`source_text`, `wanted`); a failure leaves them
        unrecorded, so the next event tries again. Before the first install `running` is ""
        and nothing is held: `install_major` chooses the pin. `archive` with no major asked
        for names no repository: the machine's archive as it is (as `install` uses it) offers
        the major installed from it, so nothing is asked of apt. A unit whose packages are
        preinstalled, or that has no network, then runs neither `apt-get update` (seconds
        failing to resolve the mirror without network) nor `apt-cache` (seconds rebuilding a
        cache an image shipped without) in its first hook.

        Raises:
            PackageError: The source could not be added or the cache refreshed.
            SlurmOpsError: The sources or preferences file could not be written.

        """
        key = f"{source_text}\n{wanted}"
        if key == self._stored.checked:
            return
        self._manager.name_source(source)
        if running:
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

    def checked(self, source_text: str, wanted: str) -> bool:
        """Whether the offer of these option values was recorded (`check`)."""
        return self._stored.checked == f"{source_text}\n{wanted}"

    def install_major(
        self, wanted: str, waits_for: Callable[[str], str | None]
    ) -> tuple[str | None, str | None]:
        """Choose the major a unit not installed yet installs, from the recorded offer.

        The newest offered major, up to the target (`wanted` or the newest), whose turn has
        come (`waits_for` answers None): a unit added during an upgrade installs the release
        the daemons before it in Slurm's order run, never one newer. Returns the major and
        None; (None, why) when no offered major may run yet (nothing is installed); (None,
        None) when the source offers no Slurm (apt then says what is missing).
        """
        offered = [str(m) for m in self._stored.offered]
        if not offered:
            return None, None
        target = wanted or offered[-1]
        allowed = [m for m in offered if not is_newer(m, target)]
        for candidate in reversed(allowed):
            if waits_for(candidate) is None:
                return candidate, None
        return None, waits_for(target) or f"no Slurm major up to {target} is offered"

    def saved(self, plan: Plan) -> bool:
        """Whether the backup before `plan`'s upgrade was taken already (a retry)."""
        return self._stored.saved == _upgrade_key(plan)

    def record_saved(self, plan: Plan) -> None:
        """Record that the backup before `plan`'s upgrade was taken."""
        self._stored.saved = _upgrade_key(plan)

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

    def install_first(self, config: SlurmCharmConfig) -> None:
        """Install, from a named repository only the Slurm major Slurm's order allows now.

        A unit added while `slurm-package-source` names a newer Slurm (`juju add-unit`
        during an upgrade, a deploy with the option set) would otherwise take the newest:
        a slurmd newer than its slurmctld, which Slurm does not support. It installs the
        newest major offered whose turn has come (`install_major`), pinned, and the
        upgrade then moves it with the rest; when none may run yet (slurmd before any
        controller said which Slurm it runs), it installs nothing and waits (status).
        Packages already on the machine (a prepared image) are only recorded, as before.
        """
        source = config.package_source
        if _names_own_repository(config.slurm_package_source) and apt.missing(
            self._manager.packages
        ):
            self.check(config.slurm_package_source, source, config.slurm_major, "")
            chosen, reason = self.install_major(config.slurm_major, self._turn.upgrade_waits_for)
            if reason is not None:
                logger.info("not installing %s yet: %s", self._manager.daemon, reason)
                return
            if chosen is not None:
                self._manager.hold(chosen)
        self._installer.install(source)

    def install_wait(self, config: SlurmCharmConfig) -> str | None:
        """Why a unit not installed yet waits to install (see `install_first`), or None."""
        if not _names_own_repository(config.slurm_package_source):
            return None
        if not self.checked(config.slurm_package_source, config.slurm_major):
            return None
        _, reason = self.install_major(config.slurm_major, self._turn.upgrade_waits_for)
        return reason

    def step(self, config: SlurmCharmConfig) -> None:
        """Upgrade Slurm's major when the options name a newer one and this unit's turn came.

        Out of turn nothing moves: the pin holds Slurm at the running major, and `status`
        says what the unit waits for.

        Raises:
            SlurmOpsError: apt, the backup or the daemon failed (the next event retries).

        """
        running = self._installer.version
        self.check(config.slurm_package_source, config.package_source, config.slurm_major, running)
        plan = self.plan(running, config.slurm_major)
        if plan.target is None or self._turn.upgrade_waits_for(plan.target) is not None:
            return
        if not self._turn.upgrades_in_charm:
            self.release(plan.target)
            return
        if not self.saved(plan):  # A retry keeps the first backup.
            self._turn.before_upgrade(plan)
            self.record_saved(plan)
        self.apply(plan.target)
        self._installer.record_version(self._manager.version())

    def status(self, config: SlurmCharmConfig) -> ops.StatusBase | None:
        """Return the upgrade's word: refused, waiting for its turn, or left to the rollout."""
        plan = self.plan(self._installer.version, config.slurm_major)
        if plan.refused is not None:
            return ops.BlockedStatus(plan.refused)
        if plan.target is None:
            return None
        note = f"; {n}" if (n := self._turn.upgrade_note()) else ""
        if (reason := self._turn.upgrade_waits_for(plan.target)) is not None:
            return ops.WaitingStatus(reason + note)
        if not self._turn.upgrades_in_charm:
            return ops.ActiveStatus(
                f"Slurm {plan.target} pending: slurmctld's rebuild-nodes upgrade=true applies it"
            )
        return ops.MaintenanceStatus(f"upgrading to Slurm {plan.target}{note}")


def _names_own_repository(source_text: str) -> bool:
    """Whether `slurm-package-source` names a repository (a PPA, a `deb` line) of its own."""
    return source_text not in BASE_SOURCES


def _upgrade_key(plan: Plan) -> str:
    return f"{plan.running}->{plan.target}"


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
